package jobs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// cappedHandler is a funcHandler with a concurrency cap (Limiter).
type cappedHandler struct {
	*funcHandler
	cap int
}

func (h cappedHandler) Concurrency() int { return h.cap }

func TestRunNowBeyondTheKindsConcurrencyCapQueuesTheJobInsteadOfRunningIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		var running, peak atomic.Int32
		release := make(chan struct{})
		h := cappedHandler{newFuncHandler("k", func(context.Context, *Job) Outcome {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
			running.Add(-1)
			return Done()
		}), 2}
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)

		const n = 20
		ids := make([]int64, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				job, done, err := q.RunNow(context.Background(), Spec{Kind: "k", Key: fmt.Sprint(i)}, 0)
				if err != nil || done {
					t.Errorf("RunNow %d: done=%v err=%v", i, done, err)
				}
				ids[i] = job.ID
			}()
		}
		wg.Wait()
		// The runner's loop may have claimed jobs while RunNow took the
		// slots: it gives back what no longer fits, so for a moment the
		// store shows one of those running with no handler. What must
		// come is two handlers and every other job back in the queue.
		waitFor(t, fmt.Sprintf("two jobs running and the other %d waiting in the queue", n-2), func() bool {
			ready := 0
			for _, id := range ids {
				if j, _ := q.Get(context.Background(), id); j.Status == store.JobReady {
					ready++
				}
			}
			return running.Load() == 2 && ready == n-2
		})
		close(release)
		for _, id := range ids {
			waitStatus(t, q, id, store.JobDone)
		}
		if p := peak.Load(); p > 2 {
			t.Errorf("%d ran at once; the kind's cap is 2", p)
		}
	})
}
