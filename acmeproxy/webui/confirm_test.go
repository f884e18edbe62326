package webui

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A confirmation page for an action the object's state does not take
// answers as the action would (409, saying why) instead of a form bound
// to fail; while the state takes it, the form is there.
func TestAConfirmationForAnActionTheStateRefusesSaysWhyInsteadOfAForm(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, f *fixture) string // returns the confirmation's path
		status  int
		want    string
	}{
		{"deactivating a valid account is asked", func(t *testing.T, f *fixture) string {
			return "/ops/accounts/acct1/deactivate"
		}, http.StatusOK, "Deactivate the account"},
		{"deactivating a deactivated account is refused", func(t *testing.T, f *fixture) string {
			if _, err := f.db.DeactivateAccount(t.Context(), "acct1", time.Now()); err != nil {
				t.Fatal(err)
			}
			return "/ops/accounts/acct1/deactivate"
		}, http.StatusConflict, "account acct1 is deactivated already"},
		{"retrying a waiting job is asked", func(t *testing.T, f *fixture) string {
			return fmt.Sprintf("/ops/jobs/%d/retry", f.job)
		}, http.StatusOK, "Retry the job now"},
		{"cancelling a waiting job is asked", func(t *testing.T, f *fixture) string {
			return fmt.Sprintf("/ops/jobs/%d/cancel", f.job)
		}, http.StatusOK, "Cancel the job"},
		{"cancelling a cancelled job is refused", func(t *testing.T, f *fixture) string {
			if _, err := f.db.CancelJob(t.Context(), f.job, time.Now()); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("/ops/jobs/%d/cancel", f.job)
		}, http.StatusConflict, "is cancelled, which is not cancelled"},
		{"retrying a done job is refused", func(t *testing.T, f *fixture) string {
			j := f.claim(t)
			if _, err := f.db.CompleteJob(t.Context(), j.ID, j.LeaseOwner, time.Now()); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("/ops/jobs/%d/retry", j.ID)
		}, http.StatusConflict, "is done, which is not retried"},
		{"retrying a running job is refused", func(t *testing.T, f *fixture) string {
			return fmt.Sprintf("/ops/jobs/%d/retry", f.claim(t).ID)
		}, http.StatusConflict, "is running, which is not retried"},
		{"cancelling a running job asked to stop already is refused", func(t *testing.T, f *fixture) string {
			j := f.claim(t)
			if _, err := f.db.CancelJob(t.Context(), j.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("/ops/jobs/%d/cancel", j.ID)
		}, http.StatusConflict, "running with its cancel requested already"},
		{"cancelling recurring housekeeping is refused", func(t *testing.T, f *fixture) string {
			j, _, err := jobs.NewQueue(f.db, nil).Enqueue(t.Context(), jobs.Spec{Kind: "crl_refresh", Key: "crl_refresh"})
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("/ops/jobs/%d/cancel", j.ID)
		}, http.StatusConflict, "recurring housekeeping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			w := f.get(t, tt.prepare(t, f))
			body := w.Body.String()
			if w.Code != tt.status || !strings.Contains(body, tt.want) {
				t.Fatalf("got %d, want %d with %q:\n%s", w.Code, tt.status, tt.want, body)
			}
			if hasForm := strings.Contains(body, `name="csrf"`); hasForm != (tt.status == http.StatusOK) {
				t.Errorf("a form on the page: %v, want %v", hasForm, tt.status == http.StatusOK)
			}
		})
	}
}

// claim makes the fixture's waiting job running, as a runner's claim does.
func (f *fixture) claim(t *testing.T) store.Job {
	t.Helper()
	at := t0.Add(2 * time.Hour)
	js, err := f.db.ClaimJobs(t.Context(), "notify_deliver", "worker", at, at.Add(time.Hour), 1)
	if err != nil || len(js) != 1 {
		t.Fatalf("claim: %v %v", js, err)
	}
	return js[0]
}

// A job past its deadline is refused a retry (409) by the queue, so its
// page offers none and its confirmation says why instead of a form; a job
// whose deadline is ahead is offered its retry and the retry is done.
func TestAJobPastItsDeadlineIsNotOfferedARetryTheServerWouldRefuse(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration // from the fixture's clock's now
		cancel   bool
		offered  bool
	}{
		{name: "refused/waiting, past its deadline", deadline: -time.Minute},
		{name: "refused/cancelled, past its deadline", deadline: -time.Minute, cancel: true},
		{name: "refused/cancelled, at its deadline", deadline: 0, cancel: true},
		{name: "ok/cancelled, deadline ahead", deadline: time.Minute, cancel: true, offered: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			j, _, err := f.db.EnqueueJob(t.Context(), store.NewJob{Kind: "revoke_upstream", RunAt: t0, Deadline: t0.Add(tt.deadline), MaxAttempts: 3},
				t0.Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if tt.cancel {
				if _, err := f.db.CancelJob(t.Context(), j.ID, t0.Add(-30*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}

			page := f.get(t, fmt.Sprintf("/ops/jobs/%d", j.ID)).Body.String()
			if got := strings.Contains(page, "Retry now…"); got != tt.offered {
				t.Errorf("the job's page offers a retry: %v, want %v:\n%s", got, tt.offered, page)
			}
			if past := strings.Contains(page, "(passed"); past == tt.offered {
				t.Errorf("the job's page says its deadline passed: %v, want %v", past, !tt.offered)
			}

			w := f.get(t, fmt.Sprintf("/ops/jobs/%d/retry", j.ID))
			wantStatus := http.StatusConflict
			if tt.offered {
				wantStatus = http.StatusOK
			}
			if w.Code != wantStatus || (!tt.offered && !strings.Contains(w.Body.String(), "past its deadline")) {
				t.Errorf("the retry's confirmation: %d, want %d saying why:\n%s", w.Code, wantStatus, w.Body.String())
			}

			// What the page offers is what the queue takes.
			w = f.post(t, fmt.Sprintf("/ops/jobs/%d/do-retry", j.ID), nil, nil)
			if took := w.Code == http.StatusSeeOther; took != tt.offered {
				t.Errorf("the retry itself: %d, taken %v; the page offered it: %v:\n%s", w.Code, took, tt.offered, w.Body.String())
			}
		})
	}
}

// Cancelling a running job makes its current attempt its last: it is
// still running, its cancel requested, and the page says that rather than
// that the job was cancelled.
func TestCancellingARunningJobSaysItsCancelIsRequestedNotDone(t *testing.T) {
	f := newFixture(t, false)
	j := f.claim(t)
	w := f.post(t, fmt.Sprintf("/ops/jobs/%d/do-cancel", j.ID), nil, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("the cancel answered %d, want 303: %s", w.Code, w.Body)
	}
	page := f.get(t, w.Header().Get("Location")).Body.String()
	done := regexp.MustCompile(`<p class="done" role="status">(.*?)</p>`).FindStringSubmatch(page)
	if done == nil || strings.Contains(done[1], "was cancelled") || !strings.Contains(done[1], "requested") {
		t.Errorf("after cancelling a running job the page says %q; want that its cancel is requested, not done", done)
	}
	if !strings.Contains(page, "(cancel requested)") {
		t.Errorf("the job's page does not show it running with its cancel requested:\n%s", page)
	}
}
