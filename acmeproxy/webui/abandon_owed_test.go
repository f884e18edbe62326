package webui

import (
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// owedPhrase is how a page says a cancelled job's Abandon is still owed.
const owedPhrase = "abandon pending on a runner of "

// cancelWhileWaiting enqueues a waiting job of kind and cancels it, so
// that its Abandon is owed; it returns the job's id.
func (f *fixture) cancelWhileWaiting(t *testing.T, kind, key string) int64 {
	t.Helper()
	j, _, err := f.db.EnqueueJob(t.Context(), store.NewJob{Kind: kind, Key: key, RunAt: t0.Add(time.Hour), MaxAttempts: 3}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := f.db.CancelJob(t.Context(), j.ID, t0); err != nil || !c.AbandonOwed {
		t.Fatalf("cancelling job %d: %+v %v; want its abandon owed", j.ID, c, err)
	}
	return j.ID
}

// A job an operator cancelled while it waited shows as cancelled with its
// Abandon pending on a runner of its kind — on its page, in the jobs list
// and in the list filtered to owed abandons — and a waiting job does not.
func TestAJobCancelledWhileWaitingSaysItsAbandonIsPendingOnARunnerOfItsKind(t *testing.T) {
	f := newFixture(t, false)
	owed := f.cancelWhileWaiting(t, "signer_issue", "order-1")
	tests := []struct {
		name string
		path string
		want bool // the page says the abandon is pending on signer_issue
	}{
		{"ok/the job's page says so", fmt.Sprintf("/ops/jobs/%d", owed), true},
		{"ok/the jobs list says so", "/ops/jobs", true},
		{"ok/the list filtered to owed abandons says so", "/ops/jobs?abandon_owed=true", true},
		{"ok/a waiting job's page does not", fmt.Sprintf("/ops/jobs/%d", f.job), false},
		{"ok/the list of waiting jobs does not", "/ops/jobs?status=ready", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := f.get(t, tc.path)
			body := html.UnescapeString(w.Body.String())
			if w.Code != 200 {
				t.Fatalf("%s: %d\n%s", tc.path, w.Code, body)
			}
			if got := strings.Contains(body, owedPhrase+"signer_issue"); got != tc.want {
				t.Errorf("%s says %q: %v; want %v\n%s", tc.path, owedPhrase+"signer_issue", got, tc.want, body)
			}
		})
	}
}

// The jobs list filtered to owed abandons lists the jobs still owing one
// only; a filter value other than true or false is refused.
func TestTheJobsListFilteredToOwedAbandonsListsOnlyThem(t *testing.T) {
	f := newFixture(t, false)
	owed := f.cancelWhileWaiting(t, "signer_issue", "order-1")
	body := f.get(t, "/ops/jobs?abandon_owed=true").Body.String()
	if !strings.Contains(body, fmt.Sprintf(`/ops/jobs/%d"`, owed)) || strings.Contains(body, fmt.Sprintf(`/ops/jobs/%d"`, f.job)) {
		t.Errorf("the filtered list does not list job %d only:\n%s", owed, body)
	}
	if w := f.get(t, "/ops/jobs?abandon_owed=yes"); w.Code != 400 {
		t.Errorf("abandon_owed=yes: %d; want 400", w.Code)
	}
}

// A cancelled job owing its Abandon, of a kind no runner here handles,
// keeps its order as it left it until another instance gives it up: the
// overview says how many of each kind, each linking to those jobs.
func TestTheOverviewShowsTheOwedAbandonsOfKindsNobodyHereRunsLinkingToThem(t *testing.T) {
	tests := []struct {
		name     string
		run      func() []string
		wantLine string
		wantKind []string // kinds linked
	}{
		{"ok/two kinds the runner lacks", func() []string { return []string{"notify_deliver"} },
			"3 cancelled jobs of kinds nobody here runs still owe their abandon", []string{"signer_issue", "signer_revoke"}},
		{"ok/one job", func() []string { return []string{"notify_deliver", "signer_issue"} },
			"1 cancelled job of a kind nobody here runs still owes its abandon", []string{"signer_revoke"}},
		{"ok/nothing when the runner runs every kind", func() []string { return []string{"notify_deliver", "signer_issue", "signer_revoke"} }, "", nil},
		{"ok/nothing when the runner's kinds are not known", nil, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			f.cancelWhileWaiting(t, "signer_issue", "o1")
			f.cancelWhileWaiting(t, "signer_issue", "o2")
			f.cancelWhileWaiting(t, "signer_revoke", "o3")
			f.ui.cfg.Operator.RunKinds = tc.run
			body := f.get(t, "/ops/").Body.String()
			line := regexp.MustCompile(`(?s)<p class="warn" id="unrun-abandons">.*?</p>`).FindString(body)
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
				href := "/ops/jobs?kind=" + kind + "&status=cancelled&abandon_owed=true"
				if !strings.Contains(html.UnescapeString(line), `<a href="`+href+`">`+kind+`</a>`) {
					t.Errorf("the line %q does not link %s", line, href)
				}
				if page := html.UnescapeString(f.get(t, href).Body.String()); !strings.Contains(page, owedPhrase+kind) {
					t.Errorf("%s lists no %s job owing its abandon:\n%s", href, kind, page)
				}
			}
		})
	}
}
