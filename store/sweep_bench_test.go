package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkTheWriterHeldByPruningABacklogOfSettledJobs prunes 200,000
// settled jobs from SQLite, nothing else writing, and reports how long its
// commits held the store's one writer (the median and the longest: what
// an issuance write waits behind), how many it took, and the whole prune.
//
//	go test -run '^$' -bench TheWriterHeldByPruningABacklog -benchtime 3x ./store/
func BenchmarkTheWriterHeldByPruningABacklogOfSettledJobs(b *testing.B) {
	const backlog = 200_000
	ctx := context.Background()
	var (
		rec   holdRecorder
		holds []time.Duration
		total time.Duration
	)
	b.StopTimer()
	for range b.N {
		db, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "t.db"), SQLiteOptions{observeHold: rec.observe})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rawW(db).Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO jobs (kind, payload, status, attempts, max_attempts, run_at, created_at, updated_at, finished_at)
			SELECT 'k', '{}', 'done', 1, 1, ?, ?, ?, ? + i FROM n`, backlog, t0.UnixMilli(), t0.UnixMilli(), t0.UnixMilli(), t0.UnixMilli()); err != nil {
			b.Fatal(err)
		}
		rec.take()
		b.StartTimer()
		began := time.Now()
		n, err := db.PruneJobs(ctx, t0.Add(time.Hour))
		total += time.Since(began)
		b.StopTimer()
		if err != nil || n != backlog {
			b.Fatalf("pruned %d, %v; want %d", n, err, backlog)
		}
		holds = append(holds, rec.take()...)
		db.Close()
	}
	slices.Sort(holds)
	b.ReportMetric(millis(quantile(holds, 0.5)), "hold-ms/median")
	b.ReportMetric(millis(holds[len(holds)-1]), "hold-ms/max")
	b.ReportMetric(float64(len(holds))/float64(b.N), "commits/op")
	b.ReportMetric(millis(total)/float64(b.N), "prune-ms")
}
