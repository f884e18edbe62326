package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A runner that could not renew a lease in time (paused, cut off from
// the database) may find, at its next renewal, that another instance took
// the job over, as a dead runner's. Its handler is then told to stop
// (its context is cancelled): the job must not run on two instances at
// once — two runs of an issuing script, say, sign two certificates.
// Whatever the stopped handler then answers, the job is the other
// runner's: this one neither records it nor abandons it (an abandon
// would undo the other runner's work: fail its order, say), even when
// the answer would have retired it here.
func TestAHandlerWhoseJobAnotherRunnerTookOverIsCancelled(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxAttempts int
		out         Outcome
	}{
		{"a retry with attempts left", 0, Retry("interrupted")},
		{"a retry on its last attempt", 1, Retry("interrupted")},
		{"a retry whose next attempt falls past its deadline", 0, RetryAfter("interrupted", time.Hour)},
		{"a failure", 0, Failed("interrupted")},
	} {
		t.Run(tc.name, func(t *testing.T) { tookOver(t, tc.maxAttempts, tc.out) })
	}
}

func tookOver(t *testing.T, maxAttempts int, out Outcome) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const lease = 30 * time.Second
		place := newPlace(t)
		clk := clocktest.New(start)
		db := openDB(t, place)
		q := NewQueue(db, clk)
		started, stopped := make(chan struct{}, 1), make(chan struct{})
		h := newFuncHandler("k", func(ctx context.Context, _ *Job) Outcome {
			started <- struct{}{}
			<-ctx.Done()
			close(stopped)
			return out
		})
		h.lease = lease
		r := startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: lease / 3}, h)
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: maxAttempts, Deadline: start.Add(50 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the job never started")
		}

		// Its lease lapsed unrenewed and another instance took the job.
		held, err := q.Get(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		later := held.LeaseUntil.Add(time.Second)
		if got, err := openDB(t, place).ClaimJobs(ctx, "k", "other-instance", later, later.Add(lease), 1); err != nil || len(got) != 1 {
			t.Fatalf("the other instance's claim: %+v %v", got, err)
		}

		// The runner's next renewal finds the job is no longer its own.
		for clk.Now().Before(start.Add(lease)) {
			select {
			case <-stopped:
			default:
				at, err := clk.NextTimer(ctx)
				if err != nil {
					t.Fatal(err)
				}
				clk.Set(at)
				continue
			}
			break
		}
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler of a job another runner took over was never told to stop")
		}
		waitFor(t, "the runner idle", func() bool { return r.Running() == 0 })
		got, err := q.Get(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != store.JobRunning || got.LeaseOwner != "other-instance" || got.Attempts != 2 {
			t.Errorf("the job is %s, leased to %q, attempts %d; want still running the other instance's attempt 2",
				got.Status, got.LeaseOwner, got.Attempts)
		}
		if a := h.abandons(job.ID); len(a) != 0 {
			t.Errorf("the runner that lost the job abandoned it: %q", a)
		}
	})
}
