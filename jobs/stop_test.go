package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Stop hands back the jobs whose handlers outlived StopTimeout, so that
// another runner — the next config's in this process, another
// instance's — takes them at once. It must cancel those handlers before
// it does: a job handed back while its handler still works is claimable
// by a runner that starts it again beside the one still running (a
// script signer's program run twice at once, a relay's upstream order
// worked on by two). So when the handler sees its context end, the job
// is still leased to the stopping runner.
func TestAJobStopHandsBackIsStillLeasedWhenItsHandlerIsCancelled(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		q := NewQueue(openDB(t, ""), nil)
		started := make(chan struct{})
		seen := make(chan Job, 1)
		h := newFuncHandler("k", func(hctx context.Context, job *Job) Outcome {
			close(started)
			<-hctx.Done()
			cur, err := q.Get(ctx, job.ID)
			if err != nil {
				t.Error(err)
			}
			seen <- cur
			return RetryAfter("interrupted", 0)
		})
		r, err := NewRunner(q, []Handler{h}, RunnerOptions{StopTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the job never started")
		}
		if err := r.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		got := <-seen
		if got.Status != store.JobRunning || got.LeaseOwner != r.Owner() {
			t.Errorf("when its handler was cancelled the job was %s, leased to %q; want still running under the stopping runner %q",
				got.Status, got.LeaseOwner, r.Owner())
		}
		after, err := q.Get(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Status != store.JobReady || after.LeaseOwner != "" || after.Attempts != 0 {
			t.Errorf("after stop the job is %s owner=%q attempts=%d; want handed back: ready, unleased, attempt refunded",
				after.Status, after.LeaseOwner, after.Attempts)
		}
	})
}
