package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// The pending_authorizations cap asks, on every new-order, how many of the
// account's authorizations are pending and unexpired. Counting them reads
// one index entry each (about 0.3 µs apiece on SQLite): at half the
// default cap of 1000 that was the largest single cost of the limits. So
// each account has a bound instead, kept in a row of rate_limits next to
// the buckets, which CreateOrder reads and moves in one statement:
//
//   - the bound is never less than the account's pending, unexpired
//     authorizations: every order that adds authorizations adds them to
//     it, or (an order without the cap: the limit off for the account, a
//     write outside the authority) deletes the row;
//   - settling, deactivating, expiring or pruning authorizations leaves
//     it alone, so it only over-counts;
//   - an order whose authorizations would take the bound over the cap, or
//     that finds no row, counts exactly (in its own transaction) and sets
//     the bound to that count plus its own.
//
// So an order fits under the bound only if it fits under the cap, and the
// count happens when the bound says "maybe not": for an account whose
// orders settle, once in every cap's worth of authorizations. A missing
// row only costs a count, so anything may delete one.
//
// The row's tat_ns packs the bound in its low boundCountBits bits under
// the time (Unix nanoseconds, rounded up to a multiple of 2^boundCountBits,
// about a second) by which every authorization it counts has expired:
// from then on it is as pointless as a full bucket, and PruneLimits
// deletes it like one.

const (
	boundCountBits = 30
	boundCountMask = 1<<boundCountBits - 1
)

// pendingBoundKey is the row of the bound of an account's pending
// authorizations (the authority's key of its pending_authorizations
// limit).
func pendingBoundKey(profile, accountID string) string {
	return "pending_authorizations/" + profile + "/" + accountID
}

// isPendingBoundKey reports whether key is pendingBoundKey(profile,
// accountID), without building it: CreateOrder asks on every new-order.
func isPendingBoundKey(key, profile, accountID string) bool {
	const prefix = "pending_authorizations/"
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != len(profile)+1+len(accountID) {
		return false
	}
	return rest[:len(profile)] == profile && rest[len(profile)] == '/' && rest[len(profile)+1:] == accountID
}

// packBound is a bound row's tat_ns: count n, every authorization it counts
// expired by expires (Unix nanoseconds).
func packBound(expires, n int64) int64 {
	return (expires+boundCountMask)&^boundCountMask | n
}

// pendingCapOf finds the PendingAuthzs spend among an order's spends: its
// index, or -1 for none.
func pendingCapOf(o Order, spends []LimitSpend) (int, error) {
	at := -1
	for i, s := range spends {
		if !s.PendingAuthzs {
			continue
		}
		if at >= 0 {
			return -1, fmt.Errorf("store: two pending authorizations caps in one order")
		}
		if !isPendingBoundKey(s.Key, o.Profile, o.AccountID) {
			return -1, fmt.Errorf("store: pending authorizations cap %q for the order of %s: want the key %q", Clip(s.Key, 64), o.AccountID, pendingBoundKey(o.Profile, o.AccountID))
		}
		at = i
	}
	return at, nil
}

// expires is when the order's authorizations have all expired, as a
// bound row's time (rounded up).
func (oc *orderCap) expires() int64 {
	var e int64
	for _, a := range oc.authzs {
		e = max(e, a.Expires.UnixNano())
	}
	return packBound(e, 0)
}

// pendingCount decides cap spend s of the order of oc, whose
// authorizations have all expired by expires (a bound row's time), by
// counting the account's pending authorizations, and sets the bound to
// that count plus the order's when it fits.
//
// On PostgreSQL (READ COMMITTED) the bound's row is locked first — an
// upsert that creates it as -1 (no bound: count) when it is missing — so
// that every order of the account that counts, moves or forgets the
// bound waits for this one: the count, a statement after the lock, sees
// the authorizations of every order that held it before, and none that
// could fit under a bound this order is about to set can slip in between.
func (db *DB) pendingCount(ctx context.Context, tx *sql.Tx, oc *orderCap, s LimitSpend, expires int64, now time.Time) (LimitDecision, error) {
	var (
		n                int64
		soonest, longest sql.NullInt64
	)
	if db.dialect.rowLock() != "" {
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO rate_limits (key, tat_ns) VALUES (?, -1)
			ON CONFLICT (key) DO UPDATE SET tat_ns = rate_limits.tat_ns`), s.Key); err != nil {
			return LimitDecision{}, fmt.Errorf("store: locking the pending authorizations bound of %s: %w", oc.o.AccountID, err)
		}
	}
	if err := tx.QueryRowContext(ctx, db.q(`SELECT COUNT(*), MIN(expires_at), MAX(expires_at) FROM authorizations
		WHERE account_id = ? AND status = 'pending' AND expires_at > ?`), oc.o.AccountID, now.UnixMilli()).Scan(&n, &soonest, &longest); err != nil {
		return LimitDecision{}, fmt.Errorf("store: counting pending authorizations of %s: %w", oc.o.AccountID, err)
	}
	if n+s.Cost > s.Burst {
		return db.pendingRefusal(ctx, tx, oc.o.AccountID, n, n+s.Cost-s.Burst, soonest, now)
	}
	if longest.Valid {
		expires = max(expires, packBound(time.UnixMilli(longest.Int64).UnixNano(), 0))
	}
	if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO rate_limits (key, tat_ns) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET tat_ns = excluded.tat_ns`), s.Key, expires|(n+s.Cost)); err != nil {
		return LimitDecision{}, fmt.Errorf("store: the pending authorizations bound of %s: %w", oc.o.AccountID, err)
	}
	return LimitDecision{Allowed: true, Remaining: s.Burst - n - s.Cost}, nil
}

// pendingRefusal is the refusal of an order over the cap of account acct,
// which holds n pending authorizations, soonest the first of them to
// expire: the order fits once over of them are gone, so it is told to
// retry when the over-th soonest expires (the soonest when over is 1; 0
// when none is pending). Settling or deactivating some frees room sooner.
func (db *DB) pendingRefusal(ctx context.Context, tx *sql.Tx, acct string, n, over int64, soonest sql.NullInt64, now time.Time) (LimitDecision, error) {
	d := LimitDecision{Held: n}
	at := soonest
	if over > 1 && over <= n {
		if err := tx.QueryRowContext(ctx, db.q(`SELECT expires_at FROM authorizations
			WHERE account_id = ? AND status = 'pending' AND expires_at > ?
			ORDER BY expires_at LIMIT 1 OFFSET ?`), acct, now.UnixMilli(), over-1).Scan(&at); err != nil {
			return LimitDecision{}, fmt.Errorf("store: when the pending authorizations of %s leave room: %w", acct, err)
		}
	}
	if at.Valid {
		d.RetryAfter = time.UnixMilli(at.Int64).Sub(now)
	}
	return d, nil
}

// forgetPendingBound deletes the bound of o's account, for an order stored
// without the cap: its authorizations are not in the bound. On PostgreSQL
// it sets the bound's row to -1 instead (no bound, as a missing row; the
// prune deletes it), creating it when missing: a row to lock, so that an
// order under the cap counting at once (see pendingCount) waits for this
// one and counts its authorizations, where a DELETE of no row would lock
// nothing; and so that every order of an account holds this row's lock
// before it looks for another replacing its certificate (see
// checkNotReplaced).
func (db *DB) forgetPendingBound(ctx context.Context, tx *sql.Tx, o Order) error {
	forget := `DELETE FROM rate_limits WHERE key = ?`
	if db.dialect.rowLock() != "" {
		forget = `INSERT INTO rate_limits (key, tat_ns) VALUES (?, -1) ON CONFLICT (key) DO UPDATE SET tat_ns = -1`
	}
	if _, err := tx.ExecContext(ctx, db.q(forget), pendingBoundKey(o.Profile, o.AccountID)); err != nil {
		return fmt.Errorf("store: forgetting the pending authorizations bound of %s: %w", o.AccountID, err)
	}
	return nil
}
