package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// capFixture is an account of profile "p" whose orders are stored with
// the pending authorizations cap (or without it).
type capFixture struct {
	t    *testing.T
	db   *DB
	acct string
	n    int // identifiers named so far
}

func newCapFixture(t *testing.T, db *DB) *capFixture {
	t.Helper()
	acct, _, err := db.CreateAccount(context.Background(), Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return &capFixture{t: t, db: db, acct: acct.ID}
}

// pendingCap is the cap spend of an order of f's account adding k
// authorizations under a cap of limit.
func (f *capFixture) pendingCap(limit, k int) LimitSpend {
	return LimitSpend{Key: pendingBoundKey("p", f.acct), Burst: int64(limit), Cost: int64(k), PendingAuthzs: true}
}

// order stores an order of k fresh identifiers at now, whose
// authorizations expire an hour later, with spends.
func (f *capFixture) order(now time.Time, k int, spends ...LimitSpend) (Order, error) {
	f.t.Helper()
	var (
		idents []acme.Identifier
		authzs []Authz
	)
	for range k {
		f.n++
		id := acme.Identifier{Type: "dns", Value: fmt.Sprintf("n%d.example.com", f.n)}
		idents = append(idents, id)
		authzs = append(authzs, Authz{Identifier: id, Expires: now.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}})
	}
	return f.db.CreateOrder(context.Background(), Order{Profile: "p", AccountID: f.acct, Identifiers: idents, Expires: now.Add(time.Hour)}, authzs, now, spends...)
}

// capped stores an order of k authorizations under a cap of limit and
// returns the cap's decision: nil when the order was stored.
func (f *capFixture) capped(now time.Time, limit, k int) *LimitDecision {
	f.t.Helper()
	_, err := f.order(now, k, f.pendingCap(limit, k))
	if err == nil {
		return nil
	}
	le, ok := errors.AsType[*LimitError](err)
	if !ok || len(le.Decisions) != 1 {
		f.t.Fatalf("an order under the cap: %v; want it stored or a LimitError of one decision", err)
	}
	return &le.Decisions[0]
}

func (f *capFixture) pending() int {
	f.t.Helper()
	n, _, err := f.db.CountPendingAuthzs(context.Background(), f.acct, t0)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestThePendingCapRefusesTheOrderThatWouldPassItAndStoresNothing(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		f := newCapFixture(t, openTest(t))
		if d := f.capped(t0, 3, 2); d != nil {
			t.Fatalf("2 of a cap of 3: refused %+v", *d)
		}
		later := t0.Add(10 * time.Minute)
		d := f.capped(later, 3, 2)
		if d == nil {
			t.Fatal("2 more over a cap of 3 were stored")
		}
		// Retry-After is when the soonest pending authorization expires.
		if d.Allowed || d.Held != 2 || d.RetryAfter != 50*time.Minute {
			t.Fatalf("the refusal: %+v; want denied, 2 held, retry after 50m", *d)
		}
		if n := f.pending(); n != 2 {
			t.Fatalf("%d authorizations pending after the refusal; want the 2 stored", n)
		}
		// The refused order changed no bound: one more still fits, and
		// then none.
		if d := f.capped(later, 3, 1); d != nil {
			t.Fatalf("the third of a cap of 3: refused %+v", *d)
		}
		if d := f.capped(later, 3, 1); d == nil || d.Held != 3 {
			t.Fatalf("a fourth of a cap of 3: %+v; want refused with 3 held", d)
		}
	})
}

// The bound over-counts authorizations that settled; an order over the
// bound but under the cap is counted and let in.
func TestAnOrderOverTheBoundButUnderTheCapIsCountedAndLetIn(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		f := newCapFixture(t, db)
		o, err := f.order(t0, 3, f.pendingCap(3, 3))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range o.AuthzIDs[:2] {
			if err := db.DeactivateAuthz(context.Background(), id, t0); err != nil {
				t.Fatal(err)
			}
		}
		if d := f.capped(t0, 3, 2); d != nil {
			t.Fatalf("2 more with 1 pending under a cap of 3: refused %+v", *d)
		}
		if d := f.capped(t0, 3, 1); d == nil || d.Held != 3 {
			t.Fatalf("one more with 3 pending: %+v; want refused with 3 held", d)
		}
	})
}

// An order stored without the cap (the limit off for its account, a
// write around the authority) is not in the bound: it forgets it, and
// the next order under the cap counts.
func TestAnOrderStoredWithoutTheCapStillCountsAgainstIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		f := newCapFixture(t, openTest(t))
		if d := f.capped(t0, 3, 1); d != nil {
			t.Fatalf("1 of a cap of 3: refused %+v", *d)
		}
		if _, err := f.order(t0, 2); err != nil {
			t.Fatal(err)
		}
		if d := f.capped(t0, 3, 1); d == nil || d.Held != 3 {
			t.Fatalf("one more with 3 pending, 2 of them stored without the cap: %+v; want refused with 3 held", d)
		}
	})
}

// Pending authorizations that expire free the cap, and the bound that
// counted them is pruned like a full bucket once they all have.
func TestExpiredAuthorizationsFreeTheCapAndTheirBoundIsPruned(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		f := newCapFixture(t, db)
		if d := f.capped(t0, 2, 2); d != nil {
			t.Fatalf("2 of a cap of 2: refused %+v", *d)
		}
		ctx := context.Background()
		if n, err := db.PruneLimits(ctx, t0.Add(time.Hour-time.Second), 0); err != nil || n != 0 {
			t.Fatalf("before the authorizations expire the sweep pruned %d (%v); want 0", n, err)
		}
		// An hour and a little (the bound's time is rounded up to about
		// a second) later, both have expired.
		after := t0.Add(time.Hour + 2*time.Second)
		if n, err := db.PruneLimits(ctx, after, 0); err != nil || n != 1 {
			t.Fatalf("after the authorizations expired the sweep pruned %d (%v); want the bound", n, err)
		}
		if d := f.capped(after, 2, 2); d != nil {
			t.Fatalf("2 of a cap of 2 once the others expired: refused %+v", *d)
		}
	})
}

// The cap and the buckets are spent in one upsert: a bucket that refuses
// leaves the cap's bound and the other buckets as they were, and a cap
// that refuses leaves the buckets.
func TestAnOrderRefusedByOneOfItsLimitsSpendsNoneOfTheOthers(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		f := newCapFixture(t, db)
		used, fresh, empty := perMinute("used"), perMinute("fresh"), perMinute("empty")
		spend(t, db, t0, used)
		for range 3 {
			spend(t, db, t0, empty)
		}
		_, err := f.order(t0, 1, f.pendingCap(2, 1), used, fresh, empty)
		le, ok := errors.AsType[*LimitError](err)
		if !ok || len(le.Decisions) != 4 || !le.Decisions[0].Allowed || !le.Decisions[1].Allowed || !le.Decisions[2].Allowed || le.Decisions[3].Allowed {
			t.Fatalf("an order whose last bucket is empty: %v; want a LimitError denying that one only", err)
		}
		if le.Decisions[3].RetryAfter != time.Minute {
			t.Fatalf("the empty bucket's Retry-After is %s; want a minute", le.Decisions[3].RetryAfter)
		}
		// used had 2 left, fresh 3: each spends one now.
		if out, _ := spend(t, db, t0, used, fresh); out[0].Remaining != 1 || out[1].Remaining != 2 {
			t.Fatalf("after the refusal the buckets spend to %d and %d remaining; want 1 and 2 (nothing taken)", out[0].Remaining, out[1].Remaining)
		}
		var rows int
		if err := db.r.QueryRowContext(context.Background(), db.q(`SELECT COUNT(*) FROM rate_limits WHERE key = ?`), pendingBoundKey("p", f.acct)).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("the refused order left %d bound rows (%v); want none", rows, err)
		}
		// Now with the cap the one to refuse: the fresh bucket, spent
		// once above, keeps its 2.
		if d := f.capped(t0, 2, 2); d != nil {
			t.Fatalf("2 of a cap of 2: refused %+v", *d)
		}
		_, err = f.order(t0, 1, f.pendingCap(2, 1), fresh)
		if le, ok := errors.AsType[*LimitError](err); !ok || le.Decisions[0].Allowed || !le.Decisions[1].Allowed {
			t.Fatalf("an order over the cap: %v; want a LimitError denying the cap only", err)
		}
		if out, _ := spend(t, db, t0, fresh); out[0].Remaining != 1 {
			t.Fatalf("after the cap refused, the bucket spends to %d remaining; want 1 (nothing taken)", out[0].Remaining)
		}
		if n := f.pending(); n != 2 {
			t.Fatalf("%d pending; want the 2 stored", n)
		}
	})
}

// Concurrent orders through two stores on one database (two instances)
// store exactly as many authorizations as the cap.
func TestConcurrentOrdersUnderOneCapStoreExactlyTheCap(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		f := newCapFixture(t, dbs[0])
		const orders, limit = 16, 5
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			stored   int
			failures []error
		)
		for i := range orders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := &capFixture{t: t, db: dbs[i%2], acct: f.acct, n: 1000 * (i + 1)}
				_, err := g.order(t0, 1, g.pendingCap(limit, 1))
				mu.Lock()
				defer mu.Unlock()
				if _, refused := errors.AsType[*LimitError](err); err != nil && !refused {
					failures = append(failures, err)
				}
				if err == nil {
					stored++
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d orders failed, the first: %v", len(failures), failures[0])
		}
		if n := f.pending(); stored != limit || n != limit {
			t.Fatalf("%d of %d concurrent orders stored, %d authorizations pending; want the cap, %d", stored, orders, n, limit)
		}
	})
}

func TestAPendingCapIsRefusedOutsideAnOrderAndWithAnotherAccountsKey(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		f := newCapFixture(t, db)
		if _, _, err := db.SpendLimits(context.Background(), []LimitSpend{f.pendingCap(3, 1)}, t0); err == nil {
			t.Error("SpendLimits took a pending authorizations cap")
		}
		other := f.pendingCap(3, 1)
		other.Key = pendingBoundKey("p", "another-account")
		if _, err := f.order(t0, 1, other); err == nil {
			t.Error("an order was stored under another account's cap")
		}
		if _, err := f.order(t0, 1, f.pendingCap(3, 1), f.pendingCap(3, 1)); err == nil {
			t.Error("an order was stored under two caps")
		}
	})
}

// CreateOrder takes a cap only under the key of the order's own account
// and profile: a key that merely shares their text, split elsewhere, is
// another bound.
func TestAPendingCapKeyIsTheOrdersProfileAndAccountExactly(t *testing.T) {
	tests := []struct {
		name, key string
		want      bool
	}{
		{"the order's own", "pending_authorizations/p/acct", true},
		{"another account", "pending_authorizations/p/acct2", false},
		{"another profile", "pending_authorizations/q/acct", false},
		{"the same text split elsewhere", "pending_authorizations/pa/cct", false},
		{"no separator", "pending_authorizations/pxacct", false},
		{"another limit", "orders_per_account/p/acct", false},
		{"the prefix alone", "pending_authorizations/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isPendingBoundKey(tt.key, "p", "acct"); got != tt.want {
				t.Errorf("isPendingBoundKey(%q, p, acct) = %v; want %v", tt.key, got, tt.want)
			}
			if got := tt.key == pendingBoundKey("p", "acct"); got != tt.want {
				t.Errorf("%q == pendingBoundKey(p, acct) is %v; want %v", tt.key, got, tt.want)
			}
		})
	}
}

// An order that needs several pending authorizations to go before it
// fits is told to retry when enough of them have expired, not when the
// first does: a client waiting that long is let in, one waiting for the
// soonest would only be refused again.
func TestAnOrderOverThePendingCapIsToldWhenEnoughAuthorizationsExpireForItToFit(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		f := newCapFixture(t, openTest(t))
		if d := f.capped(t0, 3, 1); d != nil { // expires at t0+1h
			t.Fatalf("1 of a cap of 3: refused %+v", *d)
		}
		if d := f.capped(t0.Add(10*time.Minute), 3, 2); d != nil { // expire at t0+1h10m
			t.Fatalf("3 of a cap of 3: refused %+v", *d)
		}
		// 2 more need 2 of the 3 held gone: the second soonest, at t0+1h10m.
		at := t0.Add(20 * time.Minute)
		d := f.capped(at, 3, 2)
		if d == nil || d.Allowed || d.Held != 3 || d.RetryAfter != 50*time.Minute {
			t.Fatalf("2 more over a cap of 3 with 3 held: %+v; want refused, 3 held, retry after 50m", d)
		}
		if d := f.capped(at.Add(d.RetryAfter), 3, 2); d != nil {
			t.Fatalf("after the Retry-After: refused %+v", *d)
		}
	})
}
