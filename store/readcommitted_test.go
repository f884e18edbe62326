package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The races of this file are those a READ COMMITTED write (PostgreSQL's;
// see postgresEngine) loses unless it locks what it reads: each test runs
// concurrent writers through two stores on one database, as two
// instances, and checks the invariant the store promises. On SQLite the
// single writer keeps them by itself.

// concurrently runs n calls of fn at once, fn(i) for i in [0, n), and
// returns their errors.
func concurrently(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func TestConcurrentReplacementsOfOneCertificateStoreOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		f := renewalFixture{t, dbs[0]}
		acct := f.account()
		for round := range 10 {
			old := f.cert(acct, "www.example.com", fmt.Sprintf("%02x", round+1), "aa", t0.Add(time.Hour))
			errs := concurrently(6, func(i int) error {
				_, err := renewalFixture{t, dbs[i%2]}.order(acct, "www.example.com", old.ID)
				return err
			})
			stored := 0
			for _, err := range errs {
				switch {
				case err == nil:
					stored++
				case !errors.Is(err, ErrConflict):
					t.Fatalf("round %d: a replacement failed with %v; want it stored or ErrConflict", round, err)
				}
			}
			if stored != 1 {
				t.Fatalf("round %d: %d of 6 concurrent orders replacing one certificate were stored; want one", round, stored)
			}
		}
	})
}

func TestConcurrentCRLsOfOneNameUnderTwoKeysTakeDistinctNumbers(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		seen := map[int64]string{}
		for round := range 20 {
			keys := []string{"key-old", "key-new"} // a CA renewed under its name, both publishing
			// The first build of each waits for the other's: both have
			// read the ledger and the next number, and store at once.
			var (
				both  sync.WaitGroup
				calls atomic.Int32
			)
			both.Add(len(keys))
			build := func(int64, []CRLEntry) ([]byte, time.Time, time.Time, error) {
				if calls.Add(1) <= int32(len(keys)) {
					both.Done()
					both.Wait()
				}
				return []byte{1}, t0, t0.Add(time.Hour), nil
			}
			crls := make([]CRL, len(keys))
			errs := concurrently(len(keys), func(i int) (err error) {
				crls[i], err = dbs[i].PublishCRL(ctx, keys[i], "CN=Intermediate", t0, build)
				return err
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d: publishing under %s: %v", round, keys[i], err)
				}
				if by, taken := seen[crls[i].Number]; taken {
					t.Fatalf("round %d: cRLNumber %d published under %s and %s; want each number once per name", round, crls[i].Number, by, keys[i])
				}
				seen[crls[i].Number] = keys[i]
			}
		}
	})
}

func TestAnEnqueueWhileTheLiveJobOfItsKeySettlesReturnsAJob(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		nj := NewJob{Kind: "k", Key: "order-1", MaxAttempts: 1000}
		const rounds = 1000
		errs := concurrently(2, func(i int) error {
			db := dbs[i]
			for range rounds {
				if i == 1 {
					// The other instance keeps enqueueing the key.
					if _, _, err := db.EnqueueJob(ctx, nj, t0); err != nil {
						return err
					}
					continue
				}
				// This one keeps running the live job and settling it.
				if _, _, err := db.EnqueueJob(ctx, nj, t0); err != nil {
					return err
				}
				jobs, err := db.ClaimJobs(ctx, "k", "runner", t0, t0.Add(time.Minute), 1)
				if err != nil {
					return err
				}
				for _, j := range jobs {
					if _, err := db.CompleteJob(ctx, j.ID, "runner", t0); err != nil {
						return err
					}
				}
			}
			return nil
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("instance %d: %v", i, err)
			}
		}
	})
}

func TestConcurrentSpendersOfOneBucketTwiceInACallTakeExactlyItsBurst(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		for round := range 5 {
			// A bucket nobody spent yet: no row to lock but the one the
			// spend creates.
			b := LimitSpend{Key: fmt.Sprintf("fresh-%d", round), Emission: time.Hour, Burst: 10, Cost: 1}
			allowed := 0
			var mu sync.Mutex
			errs := concurrently(12, func(i int) error {
				_, ok, err := dbs[i%2].SpendLimits(context.Background(), []LimitSpend{b, b}, t0)
				if ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
				return err
			})
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if allowed != 5 {
				t.Fatalf("round %d: %d of 12 concurrent calls spending 2 of a burst of 10 allowed; want 5", round, allowed)
			}
		}
	})
}

func TestOrdersWithAndWithoutThePendingCapAtOnceLeaveABoundThatCountsThemAll(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		ctx := context.Background()
		for round := range 10 {
			f := newCapFixture(t, dbs[0])
			errs := concurrently(8, func(i int) error {
				g := &capFixture{t: t, db: dbs[i%2], acct: f.acct, n: 1000 * (i + 1)}
				var err error
				if i%2 == 0 {
					_, err = g.order(t0, 1, g.pendingCap(1000, 1))
				} else {
					_, err = g.order(t0, 1)
				}
				return err
			})
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			var tat int64
			err := dbs[0].r.QueryRowContext(ctx, dbs[0].q(`SELECT tat_ns FROM rate_limits WHERE key = ?`), pendingBoundKey("p", f.acct)).Scan(&tat)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && tat < 0) {
				continue // no bound: the next capped order counts
			}
			if err != nil {
				t.Fatal(err)
			}
			if bound, n := tat&boundCountMask, int64(f.pending()); bound < n {
				t.Fatalf("round %d: the bound counts %d pending authorizations of the account's %d; it must never count fewer", round, bound, n)
			}
		}
	})
}

// An order whose spends name one bucket twice is decided from a read of
// the buckets and the cap's bound (spendDecided), not in one upsert:
// concurrent ones store exactly as many authorizations as the cap.
func TestConcurrentOrdersDecidedFromAReadStoreExactlyTheCap(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		f := newCapFixture(t, dbs[0])
		wide := LimitSpend{Key: "wide", Emission: time.Millisecond, Burst: 1000, Cost: 1}
		const orders, limit = 16, 5
		var (
			mu     sync.Mutex
			stored int
		)
		errs := concurrently(orders, func(i int) error {
			g := &capFixture{t: t, db: dbs[i%2], acct: f.acct, n: 1000 * (i + 1)}
			_, err := g.order(t0, 1, g.pendingCap(limit, 1), wide, wide)
			if _, refused := errors.AsType[*LimitError](err); refused {
				return nil
			}
			if err == nil {
				mu.Lock()
				stored++
				mu.Unlock()
			}
			return err
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := f.pending(); stored != limit || n != limit {
			t.Fatalf("%d of %d concurrent orders stored, %d authorizations pending; want the cap, %d", stored, orders, n, limit)
		}
	})
}

// An operator revoking expired certificates while the retention sweep
// prunes them: each revocation is recorded before its certificate is
// pruned (and pruned with it) or refused because the certificate is gone,
// and the sweep never fails on a ledger row it did not see.
func TestRevocationsDuringTheSweepOfTheirCertificatesLeaveNothingBehind(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		now := t0.Add(400 * day)
		acct := newAccount(t, dbs[0], t0).ID
		for round := range 3 {
			var certs []Certificate
			for i := range 12 {
				certs = append(certs, makeOrder(t, dbs[0], acct, life{at: now.Add(-100 * day), state: "valid",
					notAfter: now.Add(-91*day - time.Duration(i)*time.Minute)}).cert)
			}
			r := sweepAt(now)
			r.BatchOrders = 2
			errs := concurrently(len(certs)+1, func(i int) error {
				if i == len(certs) {
					_, err := dbs[1].PruneRetention(ctx, r)
					return err
				}
				c := certs[i]
				reason := 4
				_, err := dbs[0].RevokeCertificate(ctx, Revocation{CertificateID: c.ID, Profile: "p", OrderID: c.OrderID, Serial: c.Serial,
					IssuerKeyID: "ca", Reason: &reason, RevokedAt: now, NotAfter: c.NotAfter, ActorKind: "admin"},
					AuditEvent{At: now, Event: "certificate_revoked", Outcome: "success", OrderID: c.OrderID})
				if errors.Is(err, ErrWrongState) {
					return nil // pruned first
				}
				return err
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d, writer %d of %d (the last one the sweep): %v", round, i, len(errs), err)
				}
			}
			// A revocation that came after the sweep's pick of its
			// batch is pruned by the next sweep.
			if _, err := dbs[1].PruneRetention(ctx, r); err != nil {
				t.Fatal(err)
			}
			if left := rowCounts(t, dbs[0]); left["certificates"] != 0 || left["revocations"] != 0 {
				t.Fatalf("round %d: %d certificates and %d ledger rows left; want the sweep to take every expired one", round, left["certificates"], left["revocations"])
			}
		}
	})
}
