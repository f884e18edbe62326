package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A challenge left processing without its validation job (lost with an
// older binary, or pruned) gets its job again at start, bounded by its
// authorization's expiry as the lost one was: on an instance whose
// config no longer mounts the profile (a reload removed it), a job with
// no deadline would wait for the profile for ever, every 30 seconds.
func TestAValidationRequeuedAtStartEndsWithItsAuthorization(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v := &faultingDNS01{faults: 1 << 30}
		e := notifyingEnv(t, envOptions{
			opts: func(o *Options) {
				v.Validator = o.Validator
				o.Validator = v
			},
			// The validation job waits for its next attempt.
			runner: jobs.RunnerOptions{BackoffBase: time.Hour, BackoffCap: time.Hour},
		}, false)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("lost.example.com"))
		ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
		if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("challenge POST: %d %s", r.status, r.body)
		}
		key := path.Base(ch.URL)
		live, err := e.queue.List(ctx, store.JobFilter{Kind: authority.ValidateKind, Key: key})
		if err != nil || len(live) != 1 || live[0].Deadline.IsZero() {
			t.Fatalf("the challenge's validation jobs: %+v, %v; want one with a deadline", live, err)
		}
		alice.await(ch.URL, "processing")

		// The job is lost: settled without settling the challenge.
		later := time.Now().Add(2 * time.Hour)
		claimed, err := e.db.ClaimJobs(ctx, authority.ValidateKind, "lost", later, later.Add(time.Minute), 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claiming the job to lose it: %+v, %v", claimed, err)
		}
		if _, err := e.db.CompleteJob(ctx, claimed[0].ID, "lost", later); err != nil {
			t.Fatal(err)
		}

		// An instance that mounts no profile starts.
		elsewhere := authority.ValidationJobs(staticProfiles{}, e.db, clock.Real())
		if err := elsewhere.Recover(ctx, e.queue); err != nil {
			t.Fatal(err)
		}
		// The test's own runner may have claimed the new job already (on
		// PostgreSQL its enqueue wakes it at once): any status but the
		// lost job's row.
		all, err := e.queue.List(ctx, store.JobFilter{Kind: authority.ValidateKind, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		var again []store.Job
		for _, j := range all {
			if j.ID != claimed[0].ID {
				again = append(again, j)
			}
		}
		if len(again) != 1 {
			t.Fatalf("the challenge's validation jobs after the start, the lost one aside: %+v; want one", again)
		}
		if !again[0].Deadline.Equal(live[0].Deadline) {
			t.Errorf("the re-queued validation's deadline is %v; want the authorization's expiry %v, as the lost job had", again[0].Deadline, live[0].Deadline)
		}
	})
}
