package jobs

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// panickyAbandon is a handler whose Abandon panics, as a bug in a
// handler's clean-up would.
type panickyAbandon struct{ *funcHandler }

func (h panickyAbandon) Abandon(ctx context.Context, job *Job, reason string) error {
	_ = h.funcHandler.Abandon(ctx, job, reason)
	panic("abandon blew up")
}

// A panic in a handler's Abandon must not take the process down — in a
// runner's worker that is every goroutine of Caddy, and after a restart
// the job is reclaimed and abandoned again: a crash loop. The panic is
// logged, the job is still retired (it is not run again), and the runner
// goes on running other jobs.
func TestAPanickingAbandonIsLoggedAndTheJobStillRetired(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		cancel := func(t *testing.T, q *Queue, id int64) {
			if _, err := q.Cancel(context.Background(), id); err != nil {
				t.Errorf("cancel: %v", err)
			}
		}
		tests := []struct {
			name    string
			outcome Outcome
			delay   time.Duration
			// cancel, when set, is the operator's cancel: of the waiting
			// job, or, with whileRunning, of its attempt in flight.
			cancel       func(t *testing.T, q *Queue, id int64)
			whileRunning bool
			wantStatus   store.JobStatus
		}{
			{name: "failed/the handler says so", outcome: Failed("the CA said no"), wantStatus: store.JobFailed},
			{name: "failed/attempts exhausted", outcome: Retry("still down"), wantStatus: store.JobFailed},
			{name: "cancelled/while it waits", outcome: Done(), delay: time.Hour, cancel: cancel, wantStatus: store.JobCancelled},
			{name: "cancelled/while it runs", outcome: Retry("interrupted"), cancel: cancel, whileRunning: true, wantStatus: store.JobCancelled},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				q := NewQueue(openDB(t, ""), nil)
				core, logs := observer.New(zap.ErrorLevel)
				started, release := make(chan struct{}, 1), make(chan struct{})
				h := panickyAbandon{newFuncHandler("k", func(context.Context, *Job) Outcome {
					if tc.whileRunning {
						started <- struct{}{}
						<-release
					}
					return tc.outcome
				})}
				ok := newFuncHandler("next", func(context.Context, *Job) Outcome { return Done() })
				startRunner(t, q, RunnerOptions{Logger: zap.New(core), BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}, h, ok)

				attempts := 1 // the first attempt is the last
				if tc.whileRunning {
					attempts = 2 // the cancel, not the budget, ends it
				}
				job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", MaxAttempts: attempts, Delay: tc.delay})
				if err != nil {
					t.Fatal(err)
				}
				if tc.whileRunning {
					<-started
				}
				if tc.cancel != nil {
					tc.cancel(t, q, job.ID)
				}
				close(release)
				waitStatus(t, q, job.ID, tc.wantStatus)
				// A cancel that the attempt's settling write saw is
				// abandoned after that write.
				waitFor(t, "the abandon", func() bool { return len(h.abandons(job.ID)) > 0 })
				if a := h.abandons(job.ID); len(a) != 1 {
					t.Errorf("abandon called %d times, want 1", len(a))
				}
				// The runner is alive: the next job runs.
				next, _, err := q.Enqueue(context.Background(), Spec{Kind: "next"})
				if err != nil {
					t.Fatal(err)
				}
				waitStatus(t, q, next.ID, store.JobDone)
				waitFor(t, "the panic's log line", func() bool { return logs.FilterField(zap.String("event", "jobs_abandon_panic")).Len() > 0 })
				panics := logs.FilterField(zap.String("event", "jobs_abandon_panic")).All()
				if len(panics) != 1 || !strings.Contains(panics[0].ContextMap()["panic"].(string), "abandon blew up") {
					t.Errorf("logged panics: %+v; want one naming the panic", panics)
				}
			})
		}
	})
}

// Periodic housekeeping never retires itself: a round that panics, like
// one that fails, is tried again after Every, without spending the
// attempt budget. Spent, it would retire the sweep on every instance
// until the next start. The panic is logged all the same.
func TestAPanickingPeriodicRoundIsTriedAgainAfterItsIntervalAndNeverRetired(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const every, rounds = time.Hour, DefaultMaxAttempts + 2
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		core, logs := observer.New(zap.ErrorLevel)
		var runs atomic.Int32
		p := &Periodic{Name: "sweep", Every: every, Do: func(context.Context) error {
			runs.Add(1)
			panic("nil map in the sweep")
		}}
		r := startRunner(t, q, RunnerOptions{Clock: clk, Logger: zap.New(core), BackoffBase: time.Second, PollInterval: 24 * time.Hour}, p)
		for runs.Load() < rounds {
			waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
			if js, _ := q.List(ctx, store.JobFilter{Kind: "sweep", Status: store.JobFailed}); len(js) > 0 {
				t.Fatalf("the housekeeping was retired after %d panicking rounds: %q", runs.Load(), js[0].LastError)
			}
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatalf("after %d rounds: %v", runs.Load(), err)
			}
			clk.Set(at)
		}
		waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
		js, err := q.List(ctx, store.JobFilter{Kind: "sweep"})
		if err != nil || len(js) != 1 {
			t.Fatalf("periodic rows: %+v %v; want one", js, err)
		}
		got := waitStatus(t, q, js[0].ID, store.JobReady)
		if gap := got.RunAt.Sub(got.UpdatedAt); gap != every {
			t.Errorf("after a panicking round the next is in %s, want %s", gap, every)
		}
		if got.Attempts != 0 || !strings.Contains(got.LastError, "nil map in the sweep") {
			t.Errorf("after %d panicking rounds: attempts %d, last error %q; want 0 and the panic", rounds, got.Attempts, got.LastError)
		}
		if n := logs.FilterField(zap.String("event", "jobs_handler_panic")).Len(); n < rounds {
			t.Errorf("%d panics logged, want %d", n, rounds)
		}
	})
}

// panickyRecover is a handler whose Recover panics.
type panickyRecover struct{ *funcHandler }

func (panickyRecover) Recover(context.Context, *Queue) error { panic("recover blew up") }

// A panic in a handler's Recover fails the runner's start with an error
// naming the kind — Caddy then refuses the config and says why — instead
// of ending the process (at every start: a crash loop) or, in a reload
// through the admin API, leaving the new config half started.
func TestAPanickingRecoverFailsTheStartWithAnErrorNamingTheKind(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		h := panickyRecover{newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })}
		r, err := NewRunner(q, []Handler{h}, RunnerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = r.Start(context.Background())
		if err == nil || !strings.Contains(err.Error(), "recovering k") || !strings.Contains(err.Error(), "recover blew up") {
			t.Fatalf("start: %v; want an error naming the kind and the panic", err)
		}
		if err := r.Stop(); err != nil {
			t.Errorf("stopping a runner that did not start: %v", err)
		}
	})
}
