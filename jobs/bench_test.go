package jobs

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func benchQueue(b *testing.B, sync string) *Queue {
	b.Helper()
	return NewQueue(benchSQLite(b, sync), nil)
}

// BenchmarkEnqueueClaimDone measures the full life of a job: enqueue,
// claim under a lease, run a handler that does nothing, settle; on SQLite
// (at both synchronous settings) and on PostgreSQL (fsync on), there also
// with two runners on two stores of one database, as two instances run.
// Jobs are enqueued one after another (through each store in turn) while
// the runners drain them.
func BenchmarkEnqueueClaimDone(b *testing.B) {
	for _, tc := range []struct {
		name   string
		stores func(b *testing.B) []*store.DB
	}{
		{"sqlite/synchronous=FULL", func(b *testing.B) []*store.DB { return []*store.DB{benchSQLite(b, "FULL")} }},
		{"sqlite/synchronous=NORMAL", func(b *testing.B) []*store.DB { return []*store.DB{benchSQLite(b, "NORMAL")} }},
		{"postgres/runners=1", func(b *testing.B) []*store.DB { return benchPostgres(b, 1) }},
		{"postgres/runners=2", func(b *testing.B) []*store.DB { return benchPostgres(b, 2) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var qs []*Queue
			var done atomic.Int64
			h := newFuncHandler("k", func(context.Context, *Job) Outcome { done.Add(1); return Done() })
			for _, db := range tc.stores(b) {
				q := NewQueue(db, nil)
				qs = append(qs, q)
				startRunner(b, q, RunnerOptions{Concurrency: 16}, h)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := qs[i%len(qs)].Enqueue(ctx, Spec{Kind: "k", Payload: map[string]int{"i": i}}); err != nil {
					b.Fatal(err)
				}
			}
			for done.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			if got := done.Load(); got != int64(b.N) {
				b.Fatalf("%d handler runs for %d jobs", got, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

func benchSQLite(b *testing.B, sync string) *store.DB {
	b.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"), store.SQLiteOptions{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// benchPostgres opens n stores (n pools, as n instances have) on one
// fresh database of a durable cluster: fsync on, as in production
// (pgtest.Durable takes effect if no test started the cluster before).
func benchPostgres(b *testing.B, n int) []*store.DB {
	b.Helper()
	pgtest.Durable = true
	dsn := pgtest.DSN(b)
	var dbs []*store.DB
	for range n {
		db, err := store.OpenPostgres(context.Background(), dsn, store.PostgresOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	return dbs
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
