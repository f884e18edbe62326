package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Work that must reflect the state as of its enqueue (a CRL rebuilt after
// a revocation) is not lost to an attempt already under way that read the
// state before: an enqueue with Rerun that finds the job running has it
// run once more after that attempt, at once, though nothing polls.
func TestAJobEnqueuedWithRerunWhileItRunsRunsAgainAfterItsAttempt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		q := NewQueue(openDB(t, ""), nil)
		started := make(chan int64, 2)
		release := make(chan struct{})
		h := newFuncHandler("k", func(_ context.Context, j *Job) Outcome {
			started <- j.ID
			<-release
			return Done()
		})
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
		job, created, err := q.Enqueue(ctx, Spec{Kind: "k", Key: "x", Rerun: true})
		if err != nil || !created {
			t.Fatalf("enqueue: created=%v err=%v", created, err)
		}
		<-started
		again, created, err := q.Enqueue(ctx, Spec{Kind: "k", Key: "x", Rerun: true})
		if err != nil || created || again.ID != job.ID {
			t.Fatalf("enqueue while it runs: %+v created=%v err=%v; want job %d", again, created, err, job.ID)
		}
		close(release)
		select {
		case id := <-started:
			if id != job.ID {
				t.Fatalf("job %d ran; want job %d again", id, job.ID)
			}
		case <-time.After(10 * time.Second):
			got, _ := q.Get(ctx, job.ID)
			t.Fatalf("the job did not run again after its attempt: %+v", got)
		}
		waitStatus(t, q, job.ID, store.JobDone)
	})
}
