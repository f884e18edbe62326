package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// panickyAbandon is a handler whose Abandon panics, as a bug in a
// handler's clean-up would.
type panickyAbandon struct{ *funcHandler }

func (h panickyAbandon) Abandon(ctx context.Context, job *Job, reason string) {
	h.funcHandler.Abandon(ctx, job, reason)
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
