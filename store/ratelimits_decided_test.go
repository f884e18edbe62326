package store

import (
	"errors"
	"testing"
	"time"
)

// A call that names one bucket twice decides the spends in order, the
// second starting where the first left the bucket, and takes nothing when
// the second does not fit — alone, and inside an order's write with its
// pending authorizations cap.
func TestTwoSpendsOfOneBucketInOneCallAreDecidedInOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		b := perMinute("orders_per_account/p/twice")
		out, ok := spend(t, db, t0, b, b)
		if !ok || out[0].Remaining != 2 || out[1].Remaining != 1 {
			t.Fatalf("two of a full bucket of 3: %v %+v; want allowed with 2, then 1 remaining", ok, out)
		}
		out, ok = spend(t, db, t0, b, b)
		if ok || !out[0].Allowed || out[1].Allowed || out[1].RetryAfter != time.Minute {
			t.Fatalf("two of the 1 left: %v %+v; want the first to fit and the second denied for a minute", ok, out)
		}
		if out, ok := spend(t, db, t0, b); !ok || out[0].Remaining != 0 {
			t.Fatalf("after the refused call: %v %+v; want its 1 still there", ok, out)
		}

		f := newCapFixture(t, db)
		dup := perMinute("duplicate_certificates/p/twice")
		if _, err := f.order(t0, 1, f.pendingCap(2, 1), dup, dup); err != nil {
			t.Fatalf("an order spending 2 of a bucket of 3 under a cap of 2: %v", err)
		}
		_, err := f.order(t0, 1, f.pendingCap(2, 1), dup, dup)
		le, refused := errors.AsType[*LimitError](err)
		if !refused || !le.Decisions[0].Allowed || !le.Decisions[1].Allowed || le.Decisions[2].Allowed {
			t.Fatalf("an order spending 2 of the 1 left: %v; want a LimitError denying its second spend only", err)
		}
		if n := f.pending(); n != 1 {
			t.Fatalf("%d authorizations pending; want the first order's 1", n)
		}
		// The refused order left the cap's bound at the first order's 1:
		// one more fits, and the next is counted and refused.
		if d := f.capped(t0, 2, 1); d != nil {
			t.Fatalf("a second authorization under a cap of 2: refused %+v", *d)
		}
		if d := f.capped(t0, 2, 1); d == nil || d.Held != 2 {
			t.Fatalf("a third under a cap of 2: %+v; want refused with 2 pending", d)
		}
	})
}
