package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// createOrderAtOnce is CreateOrder on PostgreSQL in one round trip: its
// transaction's statements in a pipeline (see pipeline), which PostgreSQL
// runs as one implicit transaction, each statement with a snapshot of its
// own taken after the one before it is done, as in CreateOrder's
// transaction:
//
//  1. for an order without the cap, its account's bound forgotten
//     (forgetPendingBound's upsert, the row's lock);
//  2. the buckets spent and the cap's bound moved, in one upsert on their
//     newest rows (spendOrderTx's, see pgOrderSpends);
//  3. the order's rows inserted (insertOrderAtOnce's statement) under a
//     guard that fails the statement — and with it the whole pipeline,
//     the spends of 2 undone — unless the account is valid (locked, as
//     CreateOrder's transaction locks it), every spend fits, as read from
//     the rows 2 left and the buckets only checked, and no other order
//     replaces the order's certificate (checkNotReplaced's read, after
//     the bound's lock as there).
//
// What the guard refuses is left to CreateOrder's transaction, which
// decides every spend in Go and refuses with the decisions or counts the
// account's pending authorizations (see pendingCount): done is false,
// nothing written. The guard only lets through what that transaction
// would let through the same way, on the same rows: a bucket whose TAT
// the spend keeps within its period (decide), a checked bucket that has
// room (gcra), a bound not expired with room for the order's
// authorizations (moved as spendOrderTx moves it, and set to -1 when it
// has no room, which the guard refuses). So a certificate's new-order is
// one round trip instead of four (BEGIN, the spend, the inserts, COMMIT),
// and an account's first order, or one that finds its bound full or is
// refused, one more than the transaction alone (and a line in
// PostgreSQL's log, an ERROR naming pgGuardRefusal).
//
// done is also false, nothing sent, for spends with a key twice (which
// spendOrderTx decides from a read, in order) and for an order too large
// for one statement. A spend of more than a burst needs no such care: the
// guard refuses it, as gcra does.
func (db *DB) createOrderAtOnce(ctx context.Context, e *postgresEngine, o *Order, idents string, authzs []Authz, spends []LimitSpend, capAt int, now time.Time) (done bool, err error) {
	for i, s := range spends {
		if s.PendingAuthzs {
			if s.CheckOnly {
				return false, nil // not a spend spendOrderTx's upsert moves
			}
			continue
		}
		for _, p := range spends[:i] {
			if p.Key == s.Key && !(p.CheckOnly && s.CheckOnly) {
				return false, nil
			}
		}
	}
	at := now.UnixNano()
	b := &pgx.Batch{}
	if capAt < 0 {
		b.Queue(`INSERT INTO rate_limits (key, tat_ns) VALUES ($1, -1) ON CONFLICT (key) DO UPDATE SET tat_ns = -1`,
			pendingBoundKey(o.Profile, o.AccountID))
	}
	var capExpires int64
	if capAt >= 0 {
		capExpires = (&orderCap{o: *o, authzs: authzs}).expires()
	}
	if query, args := pgOrderSpends(spends, capAt, capExpires, at); query != "" {
		b.Queue(db.q(query), args...)
	}
	var ins strings.Builder
	args, ok := orderInserts(&ins, o, idents, authzs, now, 4*len(spends)+2)
	if !ok {
		return false, nil
	}
	ins.WriteString(` SELECT `)
	args = pgOrderGuard(&ins, args, o, spends, at)
	b.Queue(db.q(ins.String()), args...)
	guarded := b.Len() - 1
	err = e.pipeline(ctx, false, b, func(br pgx.BatchResults) error {
		for range guarded {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		var one int
		err := br.QueryRow().Scan(&one)
		if guardRefused(err) {
			return errNotAtOnce
		}
		return err
	})
	switch {
	case errors.Is(err, errNotAtOnce):
		return false, nil
	case err != nil:
		return false, db.unavailable(err)
	}
	return true, nil
}

// errNotAtOnce is createOrderAtOnce's guard refusing: nothing was written.
var errNotAtOnce = errors.New("store: the order is decided in a transaction")

// pgGuardRefusal is what createOrderAtOnce's guard casts to an integer to
// fail its statement: SQL has no statement that raises, and a failed cast
// (invalid_text_representation, pgGuardRefused) names its input in the
// error, so that the line PostgreSQL logs for it says what it is.
const (
	pgGuardRefusal = "acme_proxy: this new-order is decided in a transaction instead (not an error)"
	pgGuardRefused = "22P02"
)

// guardRefused reports whether err is the refusal of createOrderAtOnce's
// guard.
func guardRefused(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == pgGuardRefused && strings.Contains(pe.Message, pgGuardRefusal)
}

// pgOrderSpends is the upsert of createOrderAtOnce that spends every
// bucket spent (not CheckOnly) and moves the cap's bound, the order's
// authorizations expiring by capExpires (a bound row's time): spendOrderTx's
// upsert, returning nothing, with the bound set to -1 (no bound, as
// pendingCount's lock leaves a row it creates) where spendOrderTx's leaves
// a bound with no room unchanged, for the guard to tell the two apart.
// "" for spends that move nothing.
func pgOrderSpends(spends []LimitSpend, capAt int, capExpires, at int64) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	for _, s := range spends {
		if s.CheckOnly {
			continue
		}
		if len(args) == 0 {
			b.WriteString(`INSERT INTO rate_limits (key, tat_ns) VALUES `)
		} else {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?)")
		if s.PendingAuthzs {
			args = append(args, s.Key, int64(-1))
		} else {
			args = append(args, s.Key, at+s.Cost*int64(s.Emission))
		}
	}
	if len(args) == 0 {
		return "", nil
	}
	gcraSet := `CASE WHEN rate_limits.tat_ns > ? THEN rate_limits.tat_ns ELSE ? END + excluded.tat_ns - ?`
	if capAt < 0 {
		b.WriteString(` ON CONFLICT (key) DO UPDATE SET tat_ns = ` + gcraSet)
		return b.String(), append(args, at, at, at)
	}
	c := spends[capAt]
	b.WriteString(` ON CONFLICT (key) DO UPDATE SET tat_ns = CASE WHEN excluded.tat_ns >= 0 THEN ` + gcraSet + `
		WHEN rate_limits.tat_ns > ? AND (rate_limits.tat_ns & 1073741823) + ? <= ? THEN
			(CASE WHEN (rate_limits.tat_ns & -1073741824) > ? THEN (rate_limits.tat_ns & -1073741824) ELSE ? END)
			| ((rate_limits.tat_ns & 1073741823) + ?)
		ELSE -1 END`)
	return b.String(), append(args, at, at, at, at, c.Cost, c.Burst, capExpires, capExpires, c.Cost)
}

// pgOrderGuard writes into b, after SELECT, createOrderAtOnce's guard of
// the order o with spends at at (Unix nanoseconds), and returns args with
// its arguments: 1 when every condition holds, else the failed cast of
// pgGuardRefusal.
// Its reads come after pgOrderSpends' statement: a bucket spent holds the
// TAT that statement left, the cap's bound -1 unless it had room.
func pgOrderGuard(b *strings.Builder, args []any, o *Order, spends []LimitSpend, at int64) []any {
	// The account valid, and locked so (see accountValidForOrder); one
	// that is not is refused by CreateOrder's transaction.
	terms := []string{`EXISTS (` + accountValidForOrder + ` FOR SHARE)`}
	args = append(args, o.AccountID)
	for _, s := range spends {
		switch {
		case s.PendingAuthzs:
			terms = append(terms, `EXISTS (SELECT 1 FROM rate_limits WHERE key = ? AND tat_ns >= 0)`)
			args = append(args, s.Key)
		case s.CheckOnly:
			// gcra: max(TAT, now) + cost × emission within the period
			// of now, a missing row a full bucket.
			terms = append(terms, `GREATEST(COALESCE((SELECT tat_ns FROM rate_limits WHERE key = ?), 0) - ?::bigint, 0) + ?::bigint <= ?::bigint`)
			args = append(args, s.Key, at, s.Cost*int64(s.Emission), int64(s.Emission)*s.Burst)
		default:
			// decide: the TAT the spend moved to within the period of now.
			terms = append(terms, `(SELECT tat_ns FROM rate_limits WHERE key = ?) - ?::bigint <= ?::bigint`)
			args = append(args, s.Key, at, int64(s.Emission)*s.Burst)
		}
	}
	if o.ReplacesCertificateID != "" {
		terms = append(terms, `NOT EXISTS (SELECT 1 FROM orders WHERE replaces_certificate_id = ?
			AND status <> 'invalid' AND NOT (status IN ('pending','ready') AND expires_at <= ?::bigint))`)
		args = append(args, o.ReplacesCertificateID, o.CreatedAt.UnixMilli())
	}
	// Not a constant, so cast when the row is made, not when planned.
	fmt.Fprintf(b, `CAST(CASE WHEN %s THEN '1' ELSE '%s' END AS integer)`, strings.Join(terms, " AND "), pgGuardRefusal)
	return args
}
