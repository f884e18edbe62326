package webui

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// seedAroundTheWindow gives the fixture orders and issuance audit rows
// inside the overview's 24 hours and before them.
func (f *fixture) seedAroundTheWindow(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for i, age := range []time.Duration{25 * time.Hour, 30 * time.Hour, 23 * time.Hour, 2 * time.Hour, 48 * time.Hour, 90 * time.Minute} {
		o, err := f.db.CreateOrder(ctx, store.Order{Profile: "test", AccountID: f.account, Status: acme.StatusPending,
			Identifiers: []acme.Identifier{{Type: "dns", Value: "w" + strconv.Itoa(i) + ".example.test"}}, Expires: t0.Add(time.Hour)}, nil, t0.Add(-age))
		if err != nil {
			t.Fatal(err)
		}
		if i >= 4 {
			if err := f.db.FailOrder(ctx, o.ID, []byte(`{"type":"urn:ietf:params:acme:error:serverInternal"}`), "", t0.Add(-age)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ev := range []struct {
		event string
		age   time.Duration
	}{
		{acme.EventCertificateIssueFailed, 26 * time.Hour}, {acme.EventCertificateIssueFailed, 30 * time.Minute},
		{acme.EventCertificateIssueFailed, 3 * time.Hour}, {acme.EventCertificateIssued, 40 * time.Hour},
		{acme.EventCertificateIssued, time.Hour}, {acme.EventCertificateIssueFailed, 50 * time.Hour},
	} {
		outcome := "success"
		if ev.event == acme.EventCertificateIssueFailed {
			outcome = "failure"
		}
		if err := f.db.InsertAudit(ctx, store.AuditEvent{At: t0.Add(-ev.age), Event: ev.event, Outcome: outcome, Profile: "test"}); err != nil {
			t.Fatal(err)
		}
	}
}

// countLink is a number on the overview and the list it links to.
type countLink struct {
	what string
	n    int
	href string
}

var (
	cardLink  = regexp.MustCompile(`<a id="(issued|failed)" href="([^"]+)">(\d+)</a>`)
	orderLink = regexp.MustCompile(`<a href="(/ops/orders\?[^"]+)">(\d+)</a>`)
)

// The overview's counts are of the last 24 hours; each links to the list
// of the rows it counts, filtered by the same window, so the list shows as
// many rows as the number clicked, though older rows exist.
func TestEachWindowedCountOnTheOverviewLinksToAListOfTheRowsItCounts(t *testing.T) {
	f := newFixture(t, false)
	f.seedAroundTheWindow(t)
	body := f.get(t, "/ops/").Body.String()
	var links []countLink
	for _, m := range cardLink.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[3])
		links = append(links, countLink{m[1], n, html.UnescapeString(m[2])})
	}
	for _, m := range orderLink.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[2])
		links = append(links, countLink{"orders " + m[1], n, html.UnescapeString(m[1])})
	}
	want := map[string]int{"issued": 1, "failed": 2}
	for _, l := range links {
		if w, ok := want[l.what]; ok && l.n != w {
			t.Errorf("the overview counts %d %s; want %d", l.n, l.what, w)
		}
		delete(want, l.what)
	}
	if len(want) > 0 || len(links) < 4 {
		t.Errorf("the overview lacks the links of %v (found %+v)", want, links)
	}
	for _, l := range links {
		t.Run(l.what, func(t *testing.T) {
			w := f.get(t, l.href)
			if w.Code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", l.href, w.Code, w.Body)
			}
			rows := listRows(w.Body.String())
			if rows != l.n {
				t.Errorf("the overview counts %d; its link %s lists %d", l.n, l.href, rows)
			}
		})
	}
}

// listRows counts the rows of an orders or audit list.
func listRows(page string) int {
	if n := strings.Count(page, "<tr data-order="); n > 0 {
		return n
	}
	return strings.Count(page, "<td>"+acme.EventCertificateIssueFailed+"</td>") + strings.Count(page, "<td>"+acme.EventCertificateIssued+"</td>")
}

// A since filter that is not a time is refused, naming the parameter.
func TestTheOrdersListRefusesASinceThatIsNotATime(t *testing.T) {
	f := newFixture(t, false)
	w := f.get(t, "/ops/orders?since=yesterday")
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "since &#34;yesterday&#34; is not a time") {
		t.Errorf("GET orders?since=yesterday: %d\n%s", w.Code, w.Body)
	}
}

// Jobs of a kind no runner here handles wait for ever; the overview says
// how many of each kind, each linking to its ready jobs, where the
// operator can cancel them.
func TestTheOverviewShowsTheJobsOfKindsNobodyHereRunsLinkingToThem(t *testing.T) {
	tests := []struct {
		name     string
		run      func() []string
		wantLine string
		wantKind []string // kinds linked
	}{
		{"ok/two kinds the runner lacks", func() []string { return []string{"notify_deliver"} },
			"3 jobs of kinds nobody here runs", []string{"relay_issue", "script_issue"}},
		{"ok/one job", func() []string { return []string{"notify_deliver", "relay_issue"} },
			"1 job of a kind nobody here runs", []string{"script_issue"}},
		{"ok/nothing when the runner runs every kind", func() []string { return []string{"notify_deliver", "relay_issue", "script_issue"} }, "", nil},
		{"ok/nothing when the runner's kinds are not known", nil, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			q := jobs.NewQueue(f.db, nil)
			for _, s := range []jobs.Spec{{Kind: "relay_issue", Key: "o1"}, {Kind: "relay_issue", Key: "o2"}, {Kind: "script_issue", Key: "o3"}} {
				if _, _, err := q.Enqueue(t.Context(), s); err != nil {
					t.Fatal(err)
				}
			}
			f.ui.cfg.Operator.RunKinds = tc.run
			body := f.get(t, "/ops/").Body.String()
			line := regexp.MustCompile(`(?s)<p class="warn" id="unrun">.*?</p>`).FindString(body)
			if tc.wantLine == "" {
				if line != "" {
					t.Errorf("the overview says %s", line)
				}
				return
			}
			if !strings.Contains(line, tc.wantLine) {
				t.Fatalf("the overview's line %q lacks %q:\n%s", line, tc.wantLine, body)
			}
			for _, kind := range tc.wantKind {
				href := "/ops/jobs?kind=" + kind + "&status=ready"
				if !strings.Contains(html.UnescapeString(line), `<a href="`+href+`">`+kind+`</a>`) {
					t.Errorf("the line %q does not link %s", line, href)
				}
				if page := f.get(t, href).Body.String(); !strings.Contains(page, "<td>"+kind+"</td>") {
					t.Errorf("%s lists no %s job:\n%s", href, kind, page)
				}
			}
		})
	}
}
