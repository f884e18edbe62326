package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An operator's cancel of a waiting job runs its handler's Abandon with a
// context of its own, as the runner does: not the request's, which ends
// when the operator's client gives up or the admin API's bound passes —
// half an Abandon (a challenge left processing, an audit row unwritten)
// once the cancel itself has been recorded.
func TestAbandonAfterAnOperatorsCancelOutlivesTheRequest(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		h := &ctxAbandon{funcHandler: newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() }), err: make(chan error, 1)}
		startRunner(t, q, RunnerOptions{}, h)
		job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		request, cancel := context.WithCancel(context.Background())
		h.during = cancel // the operator's client gives up while Abandon runs
		if _, err := q.Cancel(request, job.ID); err != nil {
			t.Fatal(err)
		}
		if err := <-h.err; err != nil {
			t.Errorf("Abandon's context ended with the request: %v", err)
		}
	})
}

// ctxAbandon is a handler whose Abandon reports whether its context was
// still alive after during ran.
type ctxAbandon struct {
	*funcHandler
	during func()
	err    chan error
}

func (h *ctxAbandon) Abandon(ctx context.Context, job *Job, reason string) error {
	h.during()
	h.err <- ctx.Err()
	return h.funcHandler.Abandon(ctx, job, reason)
}

// An operator's cancel of a running job makes its attempt the last, and
// the job ends cancelled — also when that attempt, asking to be retried,
// had no attempt or time left to be retried in: the cancel, not the
// budget, is why it is not retried, and its Abandon says so.
func TestACancelledAttemptThatAsksForARetryEndsCancelledWhateverItsBudget(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name        string
			maxAttempts int
			deadline    time.Duration // from now; 0: none
		}{
			{name: "attempts left", maxAttempts: 3},
			{name: "last attempt", maxAttempts: 1},
			{name: "deadline before the next attempt", maxAttempts: 3, deadline: 20 * time.Second}, // the backoff is 30s
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				q := NewQueue(openDB(t, ""), nil)
				started, release := make(chan struct{}, 1), make(chan struct{})
				h := newFuncHandler("k", func(context.Context, *Job) Outcome {
					started <- struct{}{}
					<-release
					return Retry("still failing")
				})
				startRunner(t, q, RunnerOptions{}, h)
				spec := Spec{Kind: "k", MaxAttempts: tc.maxAttempts}
				if tc.deadline > 0 {
					spec.Deadline = time.Now().Add(tc.deadline)
				}
				job, _, err := q.Enqueue(context.Background(), spec)
				if err != nil {
					t.Fatal(err)
				}
				<-started
				if _, err := q.Cancel(context.Background(), job.ID); err != nil {
					t.Fatal(err)
				}
				close(release)
				waitStatus(t, q, job.ID, store.JobCancelled)
				waitFor(t, "the abandon", func() bool { return len(h.abandons(job.ID)) > 0 })
				if a := h.abandons(job.ID); len(a) != 1 || a[0] != cancelledReason {
					t.Errorf("abandon calls %q, want one %q", a, cancelledReason)
				}
			})
		}
	})
}

// An operator's cancel of a waiting job whose Abandon could not write its
// side effects (the database away) says so in the operator's log: the
// cancel is recorded and not undone, and nothing tries the Abandon again,
// so a failure dropped there would leave the order processing, or the
// audit row unwritten, without a word.
func TestAnAbandonThatFailsAfterAnOperatorsCancelIsLogged(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		core, logs := observer.New(zap.WarnLevel)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
		h.abandonErr = func(*Job) error { return errDatabaseAway }
		startRunner(t, q, RunnerOptions{Logger: zap.New(core)}, h)
		job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.Cancel(context.Background(), job.ID)
		if err != nil || got.Status != store.JobCancelled {
			t.Fatalf("cancel: %s, %v; want cancelled", got.Status, err)
		}
		if n := len(h.abandons(job.ID)); n != 1 {
			t.Fatalf("abandon called %d times, want once", n)
		}
		lines := logs.FilterField(zap.String("event", "jobs_abandon_failed")).All()
		if len(lines) != 1 {
			t.Fatalf("%d jobs_abandon_failed log lines, want 1", len(lines))
		}
		if e, ok := lines[0].ContextMap()["error"].(string); !ok || !strings.Contains(e, errDatabaseAway.Error()) {
			t.Errorf("the log line's error is %q, want the Abandon's", e)
		}
	})
}

// An operator's cancel of a running job whose attempt then asks to run
// again (a retry, a periodic job's reschedule) leaves the job unretired
// while its Abandon has not succeeded: a runner that stops meanwhile
// leaves it to the next runner, which reclaims it when its lease lapses,
// abandons it and retires it as cancelled. A runner that let its settling
// write retire the job first lost the Abandon for good to a stop or a
// crash: a retired job is never reclaimed.
func TestACancelledAttemptWhoseAbandonFailedUntilTheRunnerStoppedIsAbandonedByTheNextRunner(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name    string
			outcome Outcome
		}{
			{name: "retry", outcome: Retry("still down")},
			{name: "reschedule", outcome: Reschedule(time.Hour)},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				const lease = 30 * time.Second
				place := newPlace(t)
				clk := clocktest.New(start)
				q := NewQueue(openDB(t, place), clk)
				started, release := make(chan struct{}, 1), make(chan struct{})
				first := newFuncHandler("k", func(context.Context, *Job) Outcome {
					started <- struct{}{}
					<-release
					return tc.outcome
				})
				first.abandonErr = func(*Job) error { return errDatabaseAway }
				first.lease = lease
				r, err := NewRunner(q, []Handler{first}, RunnerOptions{Clock: clk, StopTimeout: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Start(ctx); err != nil {
					t.Fatal(err)
				}
				job, _, err := q.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: 3})
				if err != nil {
					t.Fatal(err)
				}
				<-started
				if _, err := q.Cancel(ctx, job.ID); err != nil {
					t.Fatal(err)
				}
				close(release)
				waitFor(t, "a failed abandon", func() bool { return len(first.abandons(job.ID)) >= 1 })
				if err := r.Stop(); err != nil {
					t.Fatal(err)
				}
				if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobRunning {
					t.Fatalf("after the stop the job is %s (%v), want still running, unretired", got.Status, err)
				}

				clk.Advance(lease + time.Second)
				next := newFuncHandler("k", func(context.Context, *Job) Outcome {
					t.Error("the cancelled job was run again")
					return Done()
				})
				startRunner(t, NewQueue(openDB(t, place), clk), RunnerOptions{Clock: clk}, next)
				got := waitStatus(t, q, job.ID, store.JobCancelled)
				if a := next.abandons(job.ID); len(a) != 1 || a[0] != cancelledReason {
					t.Errorf("the next runner's abandon calls %q, want one %q", a, cancelledReason)
				}
				if got.LastError != cancelledReason {
					t.Errorf("retired with %q, want %q", got.LastError, cancelledReason)
				}
			})
		}
	})
}

// An attempt that succeeds although an operator cancelled it meanwhile
// has done its work: the job ends done, and nothing is abandoned.
func TestACancelledAttemptThatSucceedsEndsDoneUnabandoned(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		q := NewQueue(openDB(t, ""), nil)
		started, release := make(chan struct{}, 1), make(chan struct{})
		h := newFuncHandler("k", func(context.Context, *Job) Outcome {
			started <- struct{}{}
			<-release
			return Done()
		})
		r := startRunner(t, q, RunnerOptions{}, h)
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		<-started
		if _, err := q.Cancel(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		close(release)
		waitStatus(t, q, job.ID, store.JobDone)
		if err := r.Stop(); err != nil { // no Abandon can be still on its way
			t.Fatal(err)
		}
		if a := h.abandons(job.ID); len(a) != 0 {
			t.Errorf("abandon calls %q, want none", a)
		}
	})
}
