package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An operator's retry of a job whose deadline has passed could only see
// it retired again at its first claim, abandoned a second time (a second
// revocation_failed in the audit trail, say), after answering that it
// would run. It is refused instead, saying why; before the deadline the
// retry revives the job as ever.
func TestRetryingAJobPastItsDeadlineIsRefusedNotRunToBeRetiredAgain(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name      string
			settle    func(t *testing.T, q *Queue, id int64) store.JobStatus // how the job was retired
			delay     time.Duration                                          // its first attempt's
			retryAt   time.Duration                                          // after start
			wantRetry bool
		}{
			{name: "refused/failed, past its deadline", settle: failedJob, retryAt: 2 * time.Minute},
			{name: "refused/cancelled, past its deadline", settle: cancelledJob, delay: 30 * time.Second, retryAt: 2 * time.Minute},
			{name: "ok/failed, before its deadline", settle: failedJob, retryAt: 30 * time.Second, wantRetry: true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				clk := clocktest.New(start)
				q := NewQueue(openDB(t, ""), clk)
				fail := make(chan bool, 1)
				fail <- true // the first attempt fails; a revived one succeeds
				h := newFuncHandler("k", func(context.Context, *Job) Outcome {
					select {
					case <-fail:
						return Failed("the CA said no")
					default:
						return Done()
					}
				})
				startRunner(t, q, RunnerOptions{Clock: clk}, h)
				job, _, err := q.Enqueue(ctx, Spec{Kind: "k", Delay: tc.delay, Deadline: start.Add(time.Minute)})
				if err != nil {
					t.Fatal(err)
				}
				status := tc.settle(t, q, job.ID)
				waitFor(t, "the abandon", func() bool { return len(h.abandons(job.ID)) == 1 })

				clk.Set(start.Add(tc.retryAt))
				_, err = q.RetryNow(ctx, job.ID)
				if tc.wantRetry {
					if err != nil {
						t.Fatalf("retry before the deadline: %v", err)
					}
					waitStatus(t, q, job.ID, store.JobDone)
					return
				}
				if !errors.Is(err, store.ErrWrongState) || !strings.Contains(err.Error(), "deadline") {
					t.Fatalf("retry past the deadline: %v; want ErrWrongState saying the deadline passed", err)
				}
				clk.Advance(time.Second) // the runner's poll, had the job been revived
				time.Sleep(100 * time.Millisecond)
				if got, _ := q.Get(ctx, job.ID); got.Status != status {
					t.Errorf("after the refused retry the job is %s, want %s", got.Status, status)
				}
				if a := h.abandons(job.ID); len(a) != 1 {
					t.Errorf("abandoned %d times: %q; want once", len(a), a)
				}
			})
		}
	})
}

func failedJob(t *testing.T, q *Queue, id int64) store.JobStatus {
	waitStatus(t, q, id, store.JobFailed)
	return store.JobFailed
}

func cancelledJob(t *testing.T, q *Queue, id int64) store.JobStatus {
	if _, err := q.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return store.JobCancelled
}
