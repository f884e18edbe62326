package webui

import (
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An audit row is shown alike wherever the page lists it (the audit
// search, the order's page, the overview's last failures): with the
// identifier it concerns — a challenge_failed or finalize_refused row is
// one identifier's, which nothing else on the row names — its problem type
// as an order's problem reads (without the ACME error namespace) and a
// revocation's code with its name. A reason that is no problem type (a
// refused binding's kid, which the client chose) is shown as recorded.
func TestAnAuditRowShowsItsIdentifierAndItsReasonAsAnOperatorReadsItOnEveryPage(t *testing.T) {
	f := newFixture(t, false)
	at := t0.Add(-time.Minute)
	evs := []store.AuditEvent{
		{At: at, Event: acme.EventChallengeFailed, Outcome: "failure", Profile: "test", ActorKind: "acme_account", ActorID: f.account,
			OrderID: f.order, AccountID: f.account, Identifiers: []acme.Identifier{{Type: "dns", Value: "second.example.test"}},
			Reason: string(acme.ErrorIncorrectResponse), Detail: "http-01: the response was wrong"},
		{At: at, Event: acme.EventCertificateRevoked, Outcome: "success", Profile: "test", ActorKind: "admin", OrderID: f.order,
			Identifiers: []acme.Identifier{{Type: "dns", Value: "www.example.test"}}, Serial: "0a", Reason: "4"},
		{At: at, Event: acme.EventAccountBindingRefused, Outcome: "refused", Profile: "test", ActorKind: "account_key", ActorID: "tp",
			Reason: "urn:ietf:params:acme:error:kid-the-client-chose", Detail: "no such key"},
	}
	if err := f.db.InsertAudits(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	challengeRow := "<td>second.example.test</td><td><code></code></td><td>incorrectResponse — http-01: the response was wrong</td>"
	tests := []struct {
		name string
		path string
		want []string
	}{
		{name: "the audit search", path: "/ops/audit", want: []string{challengeRow,
			"<td>www.example.test</td><td><code>0a</code></td><td>4 (superseded)</td>",
			"<td>urn:ietf:params:acme:error:kid-the-client-chose — no such key</td>"}},
		{name: "the order's page", path: "/ops/orders/order1", want: []string{challengeRow,
			"<td>www.example.test</td><td><code>0a</code></td><td>4 (superseded)</td>"}},
		{name: "the overview's last failures", path: "/ops/", want: []string{
			"<td>second.example.test</td><td>incorrectResponse — http-01: the response was wrong</td>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := f.get(t, tt.path).Body.String()
			for _, want := range tt.want {
				if !strings.Contains(body, want) {
					t.Errorf("%s lacks %s:\n%s", tt.path, want, body)
				}
			}
			if strings.Contains(body, string(acme.ErrorIncorrectResponse)) {
				t.Errorf("%s spells out the problem type's namespace", tt.path)
			}
		})
	}
}

// The overview's job queue shows, per kind, how long its longest waiting
// job has been due: recurring housekeeping scheduled for its next round
// (a row as old as the first start) and a job due later are not waiting.
func TestTheOverviewsOldestWaitingJobIsTheOneDueTheLongest(t *testing.T) {
	f := newFixture(t, false) // its notify_deliver job is due in an hour
	for _, j := range []store.NewJob{
		{Kind: "crl_refresh", Key: "crl_refresh", RunAt: t0.Add(time.Hour), MaxAttempts: 3},
		{Kind: "notify_deliver", RunAt: t0.Add(-10 * time.Minute), MaxAttempts: 3},
	} {
		if _, _, err := f.db.EnqueueJob(t.Context(), j, t0.Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	body := f.get(t, "/ops/").Body.String()
	for _, want := range []string{
		`crl_refresh</a></td><td><span class="status s-ready">ready</span></td><td class="n">1</td><td>—</td>`,
		`notify_deliver</a></td><td><span class="status s-ready">ready</span></td><td class="n">2</td><td>10m0s</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %s:\n%s", want, body)
		}
	}
}

// An order's page lists its newest audit rows, a page of them; an order
// with more links to the audit search for the rest, which then lists each
// of the order's rows once, none missing.
func TestAnOrdersPageLinksToItsAuditRowsBeyondTheFirstPage(t *testing.T) {
	f := newFixture(t, false)
	const rows = pageLimit + 3
	var evs []store.AuditEvent
	for i := range rows {
		evs = append(evs, store.AuditEvent{At: t0.Add(time.Duration(i-rows) * time.Second), Event: acme.EventRevocationRefused, Outcome: "refused",
			Profile: "test", ActorKind: "acme_account", ActorID: f.account, OrderID: f.order, Reason: string(acme.ErrorUnauthorized),
			Detail: fmt.Sprintf("row-%03d", i)})
	}
	if err := f.db.InsertAudits(t.Context(), evs); err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile(`row-\d{3}`)
	body := f.get(t, "/ops/orders/order1").Body.String()
	seen := map[string]int{}
	for _, r := range rowRE.FindAllString(body, -1) {
		seen[r]++
	}
	more := regexp.MustCompile(`id="more-audit" href="([^"]+)"`).FindStringSubmatch(body)
	if more == nil {
		t.Fatalf("the order's page shows %d of its %d audit rows and no way to the rest:\n%s", len(seen), rows, body)
	}
	next := html.UnescapeString(more[1])
	for pages := 0; next != ""; pages++ {
		if pages > rows {
			t.Fatal("the audit search never ends")
		}
		body := f.get(t, next).Body.String()
		for _, r := range rowRE.FindAllString(body, -1) {
			seen[r]++
		}
		next = ""
		if m := regexp.MustCompile(`rel="next" href="([^"]+)"`).FindStringSubmatch(body); m != nil {
			next = "/ops/audit" + html.UnescapeString(m[1])
		}
	}
	for i := range rows {
		if r := fmt.Sprintf("row-%03d", i); seen[r] != 1 {
			t.Errorf("%s listed %d times, want once", r, seen[r])
		}
	}
}
