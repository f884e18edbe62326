package jobs

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func benchQueue(b *testing.B, sync string) *Queue {
	b.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"), store.SQLiteOptions{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return NewQueue(db, nil)
}

// BenchmarkEnqueueClaimDone measures the full life of a job on SQLite:
// enqueue, claim under a lease, run a handler that does nothing, settle.
func BenchmarkEnqueueClaimDone(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			q := benchQueue(b, sync)
			var done atomic.Int64
			h := newFuncHandler("k", func(context.Context, *Job) Outcome { done.Add(1); return Done() })
			startRunner(b, q, RunnerOptions{Concurrency: 16}, h)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := q.Enqueue(ctx, Spec{Kind: "k", Payload: map[string]int{"i": i}}); err != nil {
					b.Fatal(err)
				}
			}
			for done.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchmarkIdleEnqueueToStart measures how long a job queued while the
// runner is idle waits before its handler starts (the in-process wake-up,
// not the poll, which is set to an hour here).
func BenchmarkIdleEnqueueToStart(b *testing.B) {
	q := benchQueue(b, "")
	started := make(chan time.Time, 1)
	h := newFuncHandler("k", func(context.Context, *Job) Outcome { started <- time.Now(); return Done() })
	r := startRunner(b, q, RunnerOptions{PollInterval: time.Hour}, h)
	ctx := context.Background()
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, _, err := q.Enqueue(ctx, Spec{Kind: "k"}); err != nil {
			b.Fatal(err)
		}
		total += (<-started).Sub(t0)
		for r.Running() > 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/start")
}
