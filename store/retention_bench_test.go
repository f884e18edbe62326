package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRetentionSweepOfABacklog sweeps a backlog the size one busy
// client leaves — 100 failed orders of 100 identifiers (two challenges
// each) and 1,000 expired certificates of one — and reports the longest
// batch, which is how long the sweep holds SQLite's single writer at a
// time (from handing a batch to the engine to its commit).
func BenchmarkRetentionSweepOfABacklog(b *testing.B) {
	for _, d := range testDialects {
		b.Run(d.name, func(b *testing.B) {
			ctx := context.Background()
			now := t0.Add(400 * day)
			var longest, total time.Duration
			var batches int
			b.StopTimer()
			for range b.N {
				db := d.open(b)
				acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
				if err != nil {
					b.Fatal(err)
				}
				for range 100 {
					makeOrder(b, db, acct.ID, life{at: now.Add(-40 * day), state: "invalid", idents: 100})
				}
				for range 1000 {
					makeOrder(b, db, acct.ID, life{at: now.Add(-100 * day), state: "valid", notAfter: now.Add(-91 * day)})
				}
				b.StartTimer()
				began := time.Now()
				p, err := db.PruneRetention(ctx, sweepAt(now))
				total += time.Since(began)
				b.StopTimer()
				if err != nil || p.Orders != 1100 || p.Authorizations != 100*100+1000 {
					b.Fatalf("sweep: %+v, %v", p, err)
				}
				longest, batches = max(longest, p.LongestBatch), p.Batches
				db.Close()
			}
			b.ReportMetric(float64(longest.Microseconds())/1000, "longest-batch-ms")
			b.ReportMetric(float64(batches), "batches")
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N*batches), "mean-batch-ms")
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "sweep-ms")
		})
	}
}
