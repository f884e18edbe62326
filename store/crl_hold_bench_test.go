package store

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// crlDER100000 is a stand-in for the DER of a CRL of 100,000 entries.
func crlDER100000() []byte {
	der := make([]byte, 4_900_000)
	for i := range der {
		der[i] = byte(i * 7)
	}
	return der
}

// holdRecorder keeps the commits SQLite's group commit reports (see
// groupCommit.observeHold).
type holdRecorder struct {
	mu    sync.Mutex
	holds []time.Duration
}

func (h *holdRecorder) observe(_ int, d time.Duration) {
	h.mu.Lock()
	h.holds = append(h.holds, d)
	h.mu.Unlock()
}

// take returns the commits recorded since the last take.
func (h *holdRecorder) take() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.holds
	h.holds = nil
	return out
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the q quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// BenchmarkTheWriterHeldByStoringACRLOf100000Entries stores CRLs of
// 100,000 entries (4.7 MiB) into SQLite, nothing else writing, and
// reports how long the longest commit of each held the store's one
// writer (the median over the CRLs, and the longest of all), and how many
// commits a CRL took: what every other write waits behind. With
// checkpoint=off the writer's automatic checkpoints are turned off, to
// tell the write's own hold from that of the checkpoint (copying the
// WAL's pages into the database, every 1,000 pages written) that a commit
// pays for the writes before it.
//
//	go test -run '^$' -bench TheWriterHeldByStoringACRL -benchtime 20x ./store/
func BenchmarkTheWriterHeldByStoringACRLOf100000Entries(b *testing.B) {
	for _, checkpoints := range []bool{true, false} {
		name := "checkpoint=auto"
		if !checkpoints {
			name = "checkpoint=off"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			var rec holdRecorder
			db, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "t.db"), SQLiteOptions{observeHold: rec.observe})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if !checkpoints {
				if _, err := rawW(db).Exec(`PRAGMA wal_autocheckpoint = 0`); err != nil {
					b.Fatal(err)
				}
			}
			der := crlDER100000()
			var (
				longest []time.Duration
				commits int
				number  int64
			)
			rec.take()
			for b.Loop() {
				number++
				der[0] = byte(number) // each CRL its own bytes
				if _, err := db.storeCRL(ctx, "CN=ca", CRL{IssuerKeyID: "ca", Number: number, ThisUpdate: t0, NextUpdate: t0.Add(time.Hour),
					Entries: 100000, DER: der, UpdatedAt: t0}, 0, false, nil); err != nil {
					b.Fatal(err)
				}
				holds := rec.take()
				commits += len(holds)
				longest = append(longest, slices.Max(holds))
			}
			slices.Sort(longest)
			b.ReportMetric(millis(quantile(longest, 0.5)), "longest-hold-ms/median")
			b.ReportMetric(millis(longest[len(longest)-1]), "longest-hold-ms/max")
			b.ReportMetric(float64(commits)/float64(len(longest)), "commits/op")
		})
	}
}

// BenchmarkSmallWritesWhileACRLIsStored times small durable writes (a
// one-row upsert, Flush) of 8 writers at once into SQLite, without and
// with a CRL of 100,000 entries stored every half second meanwhile (as
// a burst of revocations has it regenerated), and reports their median,
// 99th and 99.9th percentiles and longest: how much a CRL's write delays
// the writes queued behind it (those a CRL delays are a few in a
// thousand: give it tens of thousands of writes).
//
//	go test -run '^$' -bench SmallWritesWhileACRLIsStored -benchtime 100000x ./store/
func BenchmarkSmallWritesWhileACRLIsStored(b *testing.B) {
	const crlEvery = 500 * time.Millisecond
	for _, c := range []struct {
		name string
		crls bool
	}{{"crl=none", false}, {"crl=stored", true}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "t.db"), SQLiteOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			stop := make(chan struct{})
			var (
				storer sync.WaitGroup
				stored int
			)
			if c.crls {
				der := crlDER100000()
				storer.Add(1)
				go func() {
					defer storer.Done()
					tick := time.NewTicker(crlEvery)
					defer tick.Stop()
					for number := int64(1); ; number++ {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						der[0] = byte(number)
						if _, err := db.storeCRL(ctx, "CN=ca", CRL{IssuerKeyID: "ca", Number: number, ThisUpdate: t0, NextUpdate: t0.Add(time.Hour),
							Entries: 100000, DER: der, UpdatedAt: t0}, 0, false, nil); err != nil {
							b.Error(err)
							return
						}
						stored++
					}
				}()
			}
			var (
				mu    sync.Mutex
				times []time.Duration
			)
			b.SetParallelism(4) // 8 writers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					if err := db.Flush(ctx); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				times = append(times, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			close(stop)
			storer.Wait()
			slices.Sort(times)
			b.ReportMetric(millis(quantile(times, 0.5)), "p50-ms")
			b.ReportMetric(millis(quantile(times, 0.99)), "p99-ms")
			b.ReportMetric(millis(quantile(times, 0.999)), "p99.9-ms")
			b.ReportMetric(millis(times[len(times)-1]), "max-ms")
			if c.crls {
				b.ReportMetric(float64(stored), "crls")
			}
		})
	}
}
