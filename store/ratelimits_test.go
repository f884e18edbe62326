package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
)

// perMinute is a bucket of 3 per 3 minutes: one unit refills each minute.
func perMinute(key string) LimitSpend {
	return LimitSpend{Key: key, Emission: time.Minute, Burst: 3, Cost: 1}
}

func spend(t *testing.T, db *DB, now time.Time, spends ...LimitSpend) ([]LimitDecision, bool) {
	t.Helper()
	out, ok, err := db.SpendLimits(context.Background(), spends, now)
	if err != nil {
		t.Fatal(err)
	}
	return out, ok
}

func TestABucketLetsItsBurstThroughThenOneSpendPerEmissionInterval(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		clk := clocktest.New(t0)
		b := perMinute("orders_per_account/p/acct")
		steps := []struct {
			name      string
			advance   time.Duration
			allowed   bool
			remaining int64
			retry     time.Duration
		}{
			{"the first of the burst", 0, true, 2, 0},
			{"the second of the burst", 0, true, 1, 0},
			{"the last of the burst", 0, true, 0, 0},
			{"one more at once is denied until one interval refilled", 0, false, 0, time.Minute},
			{"a second before the refill is still denied, for a second", 59 * time.Second, false, 0, time.Second},
			{"one interval later, one more fits", time.Second, true, 0, 0},
			{"and then none again", 0, false, 0, time.Minute},
			{"a long pause refills the bucket, but never past its burst", time.Hour, true, 2, 0},
			{"the second after the pause", 0, true, 1, 0},
			{"the third after the pause", 0, true, 0, 0},
			{"the fourth after the pause is denied", 0, false, 0, time.Minute},
		}
		for _, s := range steps {
			clk.Advance(s.advance)
			out, ok := spend(t, db, clk.Now(), b)
			if ok != s.allowed || out[0].Allowed != s.allowed || out[0].Remaining != s.remaining || out[0].RetryAfter != s.retry {
				t.Fatalf("%s: got allowed %v (%v) remaining %d retry %s; want %v %d %s",
					s.name, ok, out[0].Allowed, out[0].Remaining, out[0].RetryAfter, s.allowed, s.remaining, s.retry)
			}
		}
	})
}

func TestASpendOfSeveralBucketsTakesFromNoneWhenOneIsEmpty(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		clk := clocktest.New(t0)
		empty, full := perMinute("empty"), perMinute("full")
		for range 3 {
			spend(t, db, clk.Now(), empty)
		}
		out, ok := spend(t, db, clk.Now(), full, empty)
		if ok || !out[0].Allowed || out[1].Allowed {
			t.Fatalf("got %v %+v; want denied by the empty bucket alone", ok, out)
		}
		// The full bucket gave nothing to the denied request.
		if out, _ := spend(t, db, clk.Now(), full); out[0].Remaining != 2 {
			t.Fatalf("after the denied spend the full bucket spends to %d remaining; want 2", out[0].Remaining)
		}
	})
}

func TestACheckOnlySpendTakesNothing(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		clk := clocktest.New(t0)
		check := perMinute("failed_validations/p/acct/x")
		check.CheckOnly = true
		for i := range 5 {
			if out, ok := spend(t, db, clk.Now(), check); !ok || out[0].Remaining != 2 {
				t.Fatalf("check %d: %v %+v; want allowed with 2 remaining", i, ok, out)
			}
		}
		for range 3 {
			spend(t, db, clk.Now(), perMinute(check.Key))
		}
		if out, ok := spend(t, db, clk.Now(), check); ok || out[0].RetryAfter != time.Minute {
			t.Fatalf("check of an empty bucket: %v %+v; want denied for a minute", ok, out)
		}
	})
}

func TestASpendOfMoreThanABurstIsDeniedForAFullRefill(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		big := perMinute("big")
		big.Cost = 4
		if out, ok := spend(t, db, t0, big); ok || out[0].RetryAfter != 3*time.Minute {
			t.Fatalf("got %v %+v; want denied for the 3 minutes of a full refill", ok, out)
		}
	})
}

// Concurrent spenders on one bucket, through two stores on one database
// (two instances), take exactly its burst between them.
func TestConcurrentSpendersOfOneBucketTakeExactlyItsBurst(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		b := LimitSpend{Key: "shared", Emission: time.Hour, Burst: 10, Cost: 1}
		const spenders = 24
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed int
			errs    []error
		)
		for i := range spenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := dbs[i%2].SpendLimits(context.Background(), []LimitSpend{b}, t0)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					allowed++
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d spends failed, the first: %v", len(errs), errs[0])
		}
		if allowed != 10 {
			t.Fatalf("%d of %d concurrent spends allowed; want the burst, 10", allowed, spenders)
		}
	})
}

func TestPruningDeletesOnlyBucketsThatAreFullAgain(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		ctx := context.Background()
		clk := clocktest.New(t0)
		spend(t, db, clk.Now(), perMinute("old"))
		clk.Advance(30 * time.Second)
		spend(t, db, clk.Now(), perMinute("recent"))
		clk.Advance(30 * time.Second) // "old" is full again, "recent" not yet
		n, err := db.PruneLimits(ctx, clk.Now(), 0)
		if err != nil || n != 1 {
			t.Fatalf("pruned %d (%v); want 1", n, err)
		}
		// "recent" kept its spend: two more fit, not three.
		if out, _ := spend(t, db, clk.Now(), perMinute("recent")); out[0].Remaining != 1 {
			t.Fatalf("the kept bucket spends to %d remaining; want 1", out[0].Remaining)
		}
	})
}

func TestPendingAuthorizationsAreCountedPerAccountUntilTheyExpireOrSettle(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		ctx := context.Background()
		o := newOrderWithAuthzs(t, db, 3)
		newOrderWithAuthzs(t, db, 2) // another account's
		n, soonest, err := db.CountPendingAuthzs(ctx, o.AccountID, t0)
		if err != nil || n != 3 || !soonest.Equal(t0.Add(time.Hour)) {
			t.Fatalf("got %d soonest %s (%v); want 3, %s", n, soonest, err, t0.Add(time.Hour))
		}
		if err := db.DeactivateAuthz(ctx, o.AuthzIDs[0], t0); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := db.CountPendingAuthzs(ctx, o.AccountID, t0); n != 2 {
			t.Fatalf("after a deactivation: %d; want 2", n)
		}
		if n, soonest, _ := db.CountPendingAuthzs(ctx, o.AccountID, t0.Add(time.Hour)); n != 0 || !soonest.IsZero() {
			t.Fatalf("at their expiry: %d, %s; want 0 and no time", n, soonest)
		}
	})
}

// An order's spends are part of its own write: over a limit nothing is
// stored, and an order that cannot be stored spends nothing.
func TestAnOrderAndItsSpendAreOneWrite(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		ctx := context.Background()
		acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		one := LimitSpend{Key: "orders_per_account/p/" + acct.ID, Emission: time.Hour, Burst: 1, Cost: 1}
		create := func(account string) error {
			_, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: account, Expires: t0.Add(time.Hour)}, nil, t0, one)
			return err
		}
		// An order that cannot be stored (its account does not exist)
		// leaves the bucket as it was.
		if err := create("no-such-account"); err == nil {
			t.Fatal("an order of no account was stored")
		}
		if err := create(acct.ID); err != nil {
			t.Fatalf("the first order: %v", err)
		}
		err = create(acct.ID)
		le, ok := errors.AsType[*LimitError](err)
		if !ok || len(le.Decisions) != 1 || le.Decisions[0].Allowed || le.Decisions[0].RetryAfter != time.Hour {
			t.Fatalf("the second order: %v; want a LimitError denying it for an hour", err)
		}
		if ids, err := db.AccountOrderIDs(ctx, acct.ID, "", time.Time{}, 10); err != nil || len(ids) != 1 {
			t.Fatalf("the account has %d orders (%v); want the one allowed", len(ids), err)
		}
	})
}
