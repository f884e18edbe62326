package store

import (
	"errors"
	"testing"
	"time"
)

// A spend that takes from some buckets and only checks others (a
// new-order: its orders and duplicates, each identifier's failed
// validations) decides every checked bucket from its own stored state,
// takes nothing from them, and takes nothing at all when one of them is
// empty — with and without the pending authorizations cap of an order.
func TestCheckedBucketsAreDecidedOneByOneAlongsideTheBucketsSpent(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		orders := perMinute("orders_per_account/p/acct")
		check := func(key string, burst int64) LimitSpend {
			s := perMinute(key)
			s.Burst, s.CheckOnly = burst, true
			return s
		}
		// used: 5 of which 1 spent; fresh: 3, never spent; empty: 3, all spent.
		used, fresh, empty := check("failed_validations/p/acct/dns:used", 5), check("failed_validations/p/acct/dns:fresh", 3), check("failed_validations/p/acct/dns:empty", 3)
		u := used
		u.CheckOnly = false
		spend(t, db, t0, u)
		for range 3 {
			spend(t, db, t0, perMinute(empty.Key))
		}

		out, ok := spend(t, db, t0, orders, used, fresh)
		if !ok || out[0].Remaining != 2 || out[1].Remaining != 3 || out[2].Remaining != 2 {
			t.Fatalf("orders with two checks that fit: %v %+v; want allowed with 2, 3 and 2 remaining", ok, out)
		}
		out, ok = spend(t, db, t0, orders, used, empty, fresh)
		if ok || !out[0].Allowed || !out[1].Allowed || out[2].Allowed || out[2].RetryAfter != time.Minute || !out[3].Allowed {
			t.Fatalf("orders with an empty checked bucket: %v %+v; want denied by that bucket alone, for a minute", ok, out)
		}
		// The refused spend took nothing from orders, the checks nothing
		// from their buckets.
		if out, _ := spend(t, db, t0, orders); out[0].Remaining != 1 {
			t.Fatalf("orders after one allowed and one refused spend: %d remaining; want 1", out[0].Remaining)
		}
		if out, _ := spend(t, db, t0, used, fresh); out[0].Remaining != 3 || out[1].Remaining != 2 {
			t.Fatalf("the checked buckets afterwards: %d and %d remaining; want 3 and 2 (nothing taken)", out[0].Remaining, out[1].Remaining)
		}

		// The same inside an order's write, with its cap.
		f := newCapFixture(t, db)
		dup := perMinute("duplicate_certificates/p/acct/x")
		_, err := f.order(t0, 1, f.pendingCap(10, 1), dup, empty)
		if le, ok := errors.AsType[*LimitError](err); !ok || !le.Decisions[0].Allowed || !le.Decisions[1].Allowed || le.Decisions[2].Allowed || le.Decisions[2].RetryAfter != time.Minute {
			t.Fatalf("an order whose identifier's failed validations are used up: %v; want a LimitError denying that bucket alone", err)
		}
		if n := f.pending(); n != 0 {
			t.Fatalf("the refused order left %d pending authorizations; want none", n)
		}
		if _, err := f.order(t0, 1, f.pendingCap(10, 1), dup, used, fresh); err != nil {
			t.Fatalf("an order whose checked buckets fit: %v", err)
		}
		if out, _ := spend(t, db, t0, dup); out[0].Remaining != 1 {
			t.Fatalf("duplicates after one stored and one refused order: %d remaining; want 1", out[0].Remaining)
		}
	})
}
