package webui

import (
	"fmt"
	"net/http"
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
			if err := f.db.CompleteJob(t.Context(), j.ID, j.LeaseOwner, time.Now()); err != nil {
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
