package jobs

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An operator's cancel of a waiting job has its handler's Abandon run with
// a context of its own, by a runner: not the request's, which ends when
// the operator's client gives up or the admin API's bound passes — half
// an Abandon (a challenge left processing, an audit row unwritten) once
// the cancel itself has been recorded.
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

// An operator's cancel of a waiting job, made on an instance that runs no
// handler of its kind (a front end facing signers elsewhere), is
// abandoned by a runner of that kind on another instance, once: there is
// no Abandon to run where the cancel is made, and without one elsewhere
// the order the job worked for stays processing, its client polling for
// ever. Two instances run the kind; only one of them takes the Abandon.
func TestAWaitingJobCancelledWhereNoRunnerOfItsKindRunsIsAbandonedOnceByAnotherInstance(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		front := NewQueue(openDB(t, place), nil)
		startRunner(t, front, RunnerOptions{PollInterval: 10 * time.Millisecond},
			newFuncHandler("other", func(context.Context, *Job) Outcome { return Done() }))
		job, _, err := front.Enqueue(ctx, Spec{Kind: "k", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := front.Cancel(ctx, job.ID); err != nil || got.Status != store.JobCancelled {
			t.Fatalf("cancel: %s, %v; want cancelled", got.Status, err)
		}

		var (
			handlers []*funcHandler
			runners  []*Runner
		)
		for range 2 { // two instances, each its own connection pool
			h := newFuncHandler("k", func(context.Context, *Job) Outcome {
				t.Error("the cancelled job was run")
				return Done()
			})
			handlers = append(handlers, h)
			runners = append(runners, startRunner(t, NewQueue(openDB(t, place), nil), RunnerOptions{PollInterval: 10 * time.Millisecond}, h))
		}
		abandons := func() (all []string) {
			for _, h := range handlers {
				all = append(all, h.abandons(job.ID)...)
			}
			return all
		}
		waitFor(t, "the abandon", func() bool { return len(abandons()) > 0 })
		waitFor(t, "the abandon to be recorded", func() bool { return !abandonOwed(t, front, job.ID) })
		for _, r := range runners { // no abandon can still be on its way
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		}
		if a := abandons(); len(a) != 1 || a[0] != cancelledReason {
			t.Errorf("abandon calls %q, want one %q", a, cancelledReason)
		}
		if got, err := front.Get(ctx, job.ID); err != nil || got.Status != store.JobCancelled || got.Attempts != 0 {
			t.Errorf("after its abandon the job is %s at attempt %d (%v), want cancelled, never attempted", got.Status, got.Attempts, err)
		}
	})
}

// An operator's cancel of a waiting job whose Abandon could not write its
// side effects — its handler failed, or the database was away — has the
// Abandon tried again until it succeeds, as a job retired by its runner
// does: the cancel is recorded and not undone, so an Abandon tried once
// and dropped left the order processing, or the audit row unwritten,
// for good. Run again, the Abandon writes its audit row once (its
// AbandonKey).
func TestAWaitingJobsCancelWhoseAbandonFailsHasItTriedAgainUntilItSucceeds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name string
			rows int // audit rows the Abandons write
			// fail is the nth Abandon's side effect and answer.
			fail func(t *testing.T, place string) func(n int32, job *Job) error
		}{
			{name: "the handler fails", fail: func(*testing.T, string) func(int32, *Job) error {
				return func(n int32, _ *Job) error {
					if n <= 2 {
						return errDatabaseAway
					}
					return nil
				}
			}},
			{name: "the store is away", rows: 1, fail: func(t *testing.T, place string) func(int32, *Job) error {
				away := openDB(t, place)
				away.Close()
				here := openDB(t, place)
				return func(n int32, job *Job) error {
					db := here
					if n == 1 {
						db = away
					}
					err := db.InsertAudit(context.Background(), store.AuditEvent{At: start, Event: "job_abandoned",
						Outcome: "failure", ActorKind: "system", Detail: fmt.Sprint(job.ID), DedupKey: AbandonKey(job)})
					if n == 2 && err == nil {
						// The write landed; its answer was lost.
						return errDatabaseAway
					}
					return err
				}
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				place := newPlace(t)
				q := NewQueue(openDB(t, place), nil)
				var calls atomic.Int32
				h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
				fail := tc.fail(t, place)
				h.abandonErr = func(job *Job) error { return fail(calls.Add(1), job) }
				r := startRunner(t, q, RunnerOptions{}, h)
				job, _, err := q.Enqueue(ctx, Spec{Kind: "k", Delay: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if got, err := q.Cancel(ctx, job.ID); err != nil || got.Status != store.JobCancelled {
					t.Fatalf("cancel: %s, %v; want cancelled", got.Status, err)
				}
				waitFor(t, "an abandon that succeeds", func() bool { return calls.Load() >= 3 })
				waitFor(t, "the abandon to be recorded", func() bool { return !abandonOwed(t, q, job.ID) })
				if err := r.Stop(); err != nil {
					t.Fatal(err)
				}
				if n := calls.Load(); n != 3 {
					t.Errorf("abandon called %d times, want 3 (until it succeeded)", n)
				}
				evs, err := q.db.SearchAudit(ctx, store.AuditFilter{Event: "job_abandoned"})
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != tc.rows {
					t.Errorf("%d audit rows of the abandon, want %d", len(evs), tc.rows)
				}
			})
		}
	})
}

// An operator's cancel of a waiting job whose Abandon kept failing until
// the runner running it stopped leaves the Abandon owed: the next runner
// of the kind claims it once the lease lapses and runs it. The job stays
// cancelled throughout.
func TestAWaitingJobsAbandonInterruptedByAStopIsRunByTheNextRunner(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		const lease = 30 * time.Second
		place := newPlace(t)
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, place), clk)
		first := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
		first.abandonErr = func(*Job) error { return errDatabaseAway }
		first.lease = lease
		r, err := NewRunner(q, []Handler{first}, RunnerOptions{Clock: clk, StopTimeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Cancel(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a failed abandon", func() bool { return len(first.abandons(job.ID)) >= 1 })
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobCancelled {
			t.Fatalf("after the stop the job is %s (%v), want cancelled", got.Status, err)
		}

		clk.Advance(lease + time.Second)
		next := newFuncHandler("k", func(context.Context, *Job) Outcome {
			t.Error("the cancelled job was run")
			return Done()
		})
		r2 := startRunner(t, NewQueue(openDB(t, place), clk), RunnerOptions{Clock: clk}, next)
		waitFor(t, "the next runner's abandon", func() bool { return len(next.abandons(job.ID)) > 0 })
		waitFor(t, "the abandon to be recorded", func() bool { return !abandonOwed(t, q, job.ID) })
		if err := r2.Stop(); err != nil {
			t.Fatal(err)
		}
		if a := next.abandons(job.ID); len(a) != 1 || a[0] != cancelledReason {
			t.Errorf("the next runner's abandon calls %q, want one %q", a, cancelledReason)
		}
		if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobCancelled {
			t.Errorf("after its abandon the job is %s (%v), want cancelled", got.Status, err)
		}
	})
}

// An operator's cancel of a waiting job is the operator's answer at once:
// the job reads cancelled — to Get, to List by status, to the counts —
// while its Abandon still runs (a slow one, or one tried again through an
// outage), and Cancel does not wait for it. A claim of the Abandon that
// showed the job running, or a cancel that answered only once the
// Abandon was done, told the operator something else.
func TestAWaitingJobReadsCancelledAtOnceWhileItsAbandonRuns(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		q := NewQueue(openDB(t, ""), nil)
		abandoning, release := make(chan struct{}, 1), make(chan struct{})
		h := &blockingAbandon{funcHandler: newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() }),
			started: abandoning, release: release}
		startRunner(t, q, RunnerOptions{}, h)
		defer close(release)
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		answered := make(chan Job, 1)
		go func() {
			got, err := q.Cancel(ctx, job.ID)
			if err != nil {
				t.Error(err)
			}
			answered <- got
		}()
		select {
		case <-abandoning:
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled job's Abandon did not start")
		}
		select {
		case got := <-answered:
			if got.Status != store.JobCancelled {
				t.Errorf("Cancel answered %s, want cancelled", got.Status)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Cancel did not answer while the Abandon ran")
		}
		if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobCancelled || got.FinishedAt.IsZero() {
			t.Errorf("while its Abandon runs the job reads %s, finished %v (%v); want cancelled, finished", got.Status, got.FinishedAt, err)
		}
		for _, st := range []store.JobStatus{store.JobCancelled, store.JobRunning, store.JobReady} {
			js, err := q.List(ctx, store.JobFilter{Status: st})
			if err != nil {
				t.Fatal(err)
			}
			if want := st == store.JobCancelled; (len(js) == 1) != want {
				t.Errorf("listed as %s: %d jobs, want the job there: %v", st, len(js), want)
			}
		}
		counts, err := q.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(counts) != 1 || counts[0] != (store.JobCount{Kind: "k", Status: store.JobCancelled, N: 1}) {
			t.Errorf("counts %+v, want one cancelled k", counts)
		}
	})
}

// blockingAbandon is a handler whose Abandon says it started, then waits
// for release.
type blockingAbandon struct {
	*funcHandler
	started chan<- struct{}
	release <-chan struct{}
}

func (h *blockingAbandon) Abandon(ctx context.Context, job *Job, reason string) error {
	h.started <- struct{}{}
	<-h.release
	return h.funcHandler.Abandon(ctx, job, reason)
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

// abandonOwed reads whether the job's Abandon is still owed.
func abandonOwed(t testing.TB, q *Queue, id int64) bool {
	t.Helper()
	j, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.AbandonOwed
}
