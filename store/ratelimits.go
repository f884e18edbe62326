package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Rate limits are GCRA buckets (the generic cell rate algorithm, as
// Boulder's ratelimits package keeps them): a bucket of count requests per
// period lets one request in every emission interval (period / count) and
// a burst of count at once. Its whole state is one time, the "theoretical
// arrival time" (TAT): when the bucket would be full again if nothing more
// were spent. A spend of cost moves the TAT cost intervals later; it is
// allowed when the TAT stays within period of now. A bucket whose TAT has
// passed is full, the same as one never used, so its row can be pruned.
//
// The buckets live in the store, one row per key, so that every instance
// on one database spends from the same buckets.

// LimitSpend is one bucket a request spends from (or only checks).
type LimitSpend struct {
	// Key names the bucket; the caller builds it (limit, profile,
	// subject) and bounds its length.
	Key string
	// Emission is the interval one unit refills in: the limit's period
	// divided by its count. Positive.
	Emission time.Duration
	// Burst is the limit's count: how many units a full bucket holds.
	// Positive.
	Burst int64
	// Cost is how many units the request takes; usually 1.
	Cost int64
	// CheckOnly asks whether Cost would fit, without taking it: the
	// bucket is spent by something that happens later.
	CheckOnly bool
	// PendingAuthzs makes the spend the cap on the pending authorizations
	// of the account of the order CreateOrder stores (and of no other
	// call): Burst is the cap, Cost the authorizations the order adds,
	// Key pendingBoundKey's for the order; Emission is unused. See
	// ratelimits_pending.go.
	PendingAuthzs bool
}

// LimitDecision is the answer for one LimitSpend.
type LimitDecision struct {
	// Allowed says whether the spend fits.
	Allowed bool
	// Remaining is how many more units the bucket holds after the spend
	// (a CheckOnly one counted as spent); 0 when denied.
	Remaining int64
	// RetryAfter, when denied, is how long until the spend would fit; it
	// is at most Emission × Cost (the refill of what it asks). For a
	// PendingAuthzs spend, until enough of the account's pending
	// authorizations have expired for the order to fit (0 when none is
	// pending).
	RetryAfter time.Duration
	// Held, for a denied PendingAuthzs spend, is how many authorizations
	// of the account were pending.
	Held int64
}

// MaxLimitKeys bounds the buckets of one SpendLimits call (or of one
// order's write). A new-order checks one failed_validations bucket per
// identifier beside a few of its own, so the bound must hold the largest
// order the HTTP front takes (1000 identifiers) with room to spare; the
// statements it makes stay within SQLite's 2000 result columns and
// 32766 parameters.
const MaxLimitKeys = 1024

// SpendLimits decides every spend at now and, only when each is allowed,
// takes them all, in one write: either every bucket is spent or none is.
// The decisions are in the order of spends. A denied spend changes
// nothing. The write is lazy (see engine): a bucket spent just before a
// crash of the machine may come back full, which costs at most one
// burst, and the write that follows a spend (the order it let through) is
// durable and makes it so.
//
// On SQLite the single writer makes the read-and-update atomic. On
// PostgreSQL (READ COMMITTED) the spend is one upsert that moves each
// bucket on its newest row, a concurrent spender of the bucket waiting
// for this one to commit or roll back; the calls decided from a read
// first lock the buckets they spend (see readSpentTATs).
func (db *DB) SpendLimits(ctx context.Context, spends []LimitSpend, now time.Time) ([]LimitDecision, bool, error) {
	if err := checkSpends(spends); err != nil {
		return nil, false, err
	}
	for _, s := range spends {
		if s.PendingAuthzs {
			return nil, false, fmt.Errorf("store: the pending authorizations cap is spent by CreateOrder only")
		}
	}
	var (
		out     []LimitDecision
		allowed bool
	)
	err := db.withLazyTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, allowed, err = db.spendTx(ctx, tx, spends, now)
		if err == nil && !allowed {
			return errLimitDenied
		}
		return err
	})
	if errors.Is(err, errLimitDenied) {
		return out, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: spending rate limits: %w", err)
	}
	return out, allowed, nil
}

// errLimitDenied undoes the write of a SpendLimits whose spend did not
// fit: spendTx may have spent the buckets before it knew.
var errLimitDenied = errors.New("store: over a rate limit")

// spendTx is SpendLimits inside tx: it decides every spend and, when
// each is allowed, writes them all. When one is denied it may have
// written already: the caller must then undo tx (return an error from it).
// See spendOrderTx for how.
func (db *DB) spendTx(ctx context.Context, tx *sql.Tx, spends []LimitSpend, now time.Time) ([]LimitDecision, bool, error) {
	return db.spendOrderTx(ctx, tx, spends, now, nil)
}

// orderCap is the order whose write spends a PendingAuthzs spend.
type orderCap struct {
	o      Order
	authzs []Authz
}

// spendOrderTx is spendTx for spends that may hold the PendingAuthzs cap
// of the order oc (nil for none), whose bound (see pendingBoundKey) moves
// with the buckets and is counted only when it does not let the order in.
//
// On SQLite it is spendDecided: one read of every bucket, the decisions
// in Go, one write of what moved. That costs a third fewer instructions
// than the upsert below, whose RETURNING SQLite buffers in a temporary
// table of its own for every call. On PostgreSQL, where each statement
// is a round trip to the server, spending is one statement: an upsert
// that moves each TAT and returns it, the decision following from the
// new TAT alone (it is allowed when it stays within the period of now),
// which also returns the buckets only checked. A call whose spends share
// a key, or that asks more than a burst, is spendDecided there too.
func (db *DB) spendOrderTx(ctx context.Context, tx *sql.Tx, spends []LimitSpend, now time.Time, oc *orderCap) ([]LimitDecision, bool, error) {
	if len(spends) == 0 {
		return []LimitDecision{}, true, nil
	}
	if db.dialect.name() == "sqlite" {
		return db.spendDecided(ctx, tx, spends, now, oc)
	}
	var spent, checked int
	capAt := -1
	for i, s := range spends {
		if s.PendingAuthzs {
			capAt = i
			continue
		}
		if s.Cost > s.Burst {
			return db.spendDecided(ctx, tx, spends, now, oc)
		}
		for _, o := range spends[:i] {
			// A key twice is decided in order, the second spend starting
			// where the first left it: that takes a read.
			if o.Key == s.Key && !(o.CheckOnly && s.CheckOnly) {
				return db.spendDecided(ctx, tx, spends, now, oc)
			}
		}
		if s.CheckOnly {
			checked++
		} else {
			spent++
		}
	}
	at := now.UnixNano()
	tats := make(map[string]int64, len(spends))
	var capExpires int64
	if capAt >= 0 {
		capExpires = oc.expires()
	}
	if spent > 0 || capAt >= 0 {
		// A new bucket's TAT is now + cost×emission, an existing one's
		// max(TAT, now) + cost×emission: the excluded row carries
		// now + cost×emission. The cap's bound row is the one excluded
		// with a negative value: when it exists and the order fits under
		// it, it moves (as in spendDecided); when it does not, it is
		// inserted as -1, which only pendingCount then replaces.
		var (
			b    strings.Builder
			args = make([]any, 0, 2*spent+12)
		)
		b.WriteString(`INSERT INTO rate_limits (key, tat_ns) VALUES `)
		for _, s := range spends {
			if s.CheckOnly {
				continue
			}
			if len(args) > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?)")
			if s.PendingAuthzs {
				args = append(args, s.Key, int64(-1))
			} else {
				args = append(args, s.Key, at+s.Cost*int64(s.Emission))
			}
		}
		gcraSet := `CASE WHEN rate_limits.tat_ns > ? THEN rate_limits.tat_ns ELSE ? END + excluded.tat_ns - ?`
		if capAt < 0 {
			b.WriteString(` ON CONFLICT (key) DO UPDATE SET tat_ns = ` + gcraSet)
			args = append(args, at, at, at)
		} else {
			c := spends[capAt]
			b.WriteString(` ON CONFLICT (key) DO UPDATE SET tat_ns = CASE WHEN excluded.tat_ns >= 0 THEN ` + gcraSet + `
				ELSE (CASE WHEN (rate_limits.tat_ns & -1073741824) > ? THEN (rate_limits.tat_ns & -1073741824) ELSE ? END)
					| ((rate_limits.tat_ns & 1073741823) + ?) END
				WHERE excluded.tat_ns >= 0 OR (rate_limits.tat_ns > ? AND (rate_limits.tat_ns & 1073741823) + ? <= ?)`)
			args = append(args, at, at, at, capExpires, capExpires, c.Cost, at, c.Cost, c.Burst)
		}
		b.WriteString(` RETURNING key, tat_ns`)
		// The buckets only checked are read by the same statement when a
		// row is sure to come back (a bucket spent, not only the cap):
		// one uncorrelated subquery per key, the same on every returned
		// row. Their keys are none of those upserted (see above), so the
		// read sees them as they were.
		var checks []string
		if spent > 0 && checked > 0 {
			checks = make([]string, 0, checked)
			for _, s := range spends {
				if s.CheckOnly {
					b.WriteString(`, (SELECT c.tat_ns FROM rate_limits c WHERE c.key = ?)`)
					args = append(args, s.Key)
					checks = append(checks, s.Key)
				}
			}
			checked = 0
		}
		if err := scanTATs(ctx, tx, db.q(b.String()), args, tats, checks); err != nil {
			return nil, false, err
		}
	}
	if checked > 0 {
		keys := make([]any, 0, checked)
		for _, s := range spends {
			if s.CheckOnly {
				keys = append(keys, s.Key)
			}
		}
		if err := scanTATs(ctx, tx, db.q(`SELECT key, tat_ns FROM rate_limits WHERE key IN (`+marks(len(keys))+`)`), keys, tats, nil); err != nil {
			return nil, false, err
		}
	}
	out, allowed := make([]LimitDecision, len(spends)), true
	for i, s := range spends {
		tat, ok := tats[s.Key]
		switch {
		case s.PendingAuthzs && ok && tat >= 0:
			out[i] = LimitDecision{Allowed: true, Remaining: s.Burst - tat&boundCountMask}
		case s.PendingAuthzs:
			// No bound, or not low enough: count.
			d, err := db.pendingCount(ctx, tx, oc, s, capExpires, now)
			if err != nil {
				return nil, false, err
			}
			out[i] = d
		case s.CheckOnly:
			out[i], _ = gcra(tat, s, at)
		case !ok:
			return nil, false, fmt.Errorf("store: rate limit bucket %q: the spend returned no row", Clip(s.Key, 64))
		default:
			out[i] = decide(tat, s, at)
		}
		allowed = allowed && out[i].Allowed
	}
	return out, allowed, nil
}

// scanTATs runs query, which returns (key, tat_ns) rows, into tats. When
// checks is not empty each row has one more column per key of checks,
// that key's TAT (NULL for no row), the same on every row.
func scanTATs(ctx context.Context, tx *sql.Tx, query string, args []any, tats map[string]int64, checks []string) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		k     string
		tat   int64
		dest  = make([]any, 2+len(checks))
		cols  = make([]sql.NullInt64, len(checks))
		first = true
	)
	dest[0], dest[1] = &k, &tat
	for i := range cols {
		dest[2+i] = &cols[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		tats[k] = tat
		if first {
			first = false
			for i, c := range cols {
				if c.Valid {
					tats[checks[i]] = c.Int64
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if first && len(checks) > 0 {
		return fmt.Errorf("store: rate limit buckets %q: the spend returned no row", Clip(checks[0], 64))
	}
	return nil
}

// spendDecided is spendOrderTx deciding every spend in Go from one read
// of its buckets and of the cap's bound, then, only when each is allowed,
// writing every bucket it moves in one statement. It takes any spends: a
// key twice is decided in order, the second spend starting where the
// first left it; a spend of more than a burst is denied. The cap fits
// when its bound, not yet expired, has room for the order's
// authorizations, and moves by them; otherwise pendingCount counts. On
// PostgreSQL the read locks the buckets spent from first (readSpentTATs).
//
// It runs on every limited new-order, so it keeps its state in slices by
// key (keyIndex) rather than maps, boxes each key once for both
// statements, and takes their text from tatSQL.
func (db *DB) spendDecided(ctx context.Context, tx *sql.Tx, spends []LimitSpend, now time.Time, oc *orderCap) ([]LimitDecision, bool, error) {
	ki := keyIndex(spends)
	tats, err := db.readSpentTATs(ctx, tx, spends, ki)
	if err != nil {
		return nil, false, err
	}
	at := now.UnixNano()
	out, allowed := make([]LimitDecision, len(spends)), true
	moved, nMoved := make([]bool, len(ki.keys)), 0
	move := func(k int, tat int64) {
		if !moved[k] {
			moved[k] = true
			nMoved++
		}
		tats[k] = sql.NullInt64{Int64: tat, Valid: true}
	}
	for i, s := range spends {
		if s.PendingAuthzs {
			continue
		}
		k := ki.at[i]
		tat := tats[k].Int64 // 0 for no row: a full bucket
		var next int64
		out[i], next = gcra(tat, s, at)
		allowed = allowed && out[i].Allowed
		if !s.CheckOnly && next != tat {
			move(k, next)
		}
	}
	// The cap last, so that a count (which writes the bound itself)
	// happens only when the buckets' decisions are known.
	for i, s := range spends {
		if !s.PendingAuthzs {
			continue
		}
		k := ki.at[i]
		expires := oc.expires()
		if b := tats[k]; b.Valid && b.Int64 > at && b.Int64&boundCountMask+s.Cost <= s.Burst {
			n := b.Int64&boundCountMask + s.Cost
			out[i] = LimitDecision{Allowed: true, Remaining: s.Burst - n}
			move(k, max(b.Int64&^boundCountMask, expires)|n)
			continue
		}
		d, err := db.pendingCount(ctx, tx, oc, s, expires, now)
		if err != nil {
			return nil, false, err
		}
		out[i] = d
		allowed = allowed && d.Allowed
	}
	if !allowed || nMoved == 0 {
		return out, allowed, nil
	}
	// In the order of the spends, so that two writers on PostgreSQL lock
	// shared rows in one order.
	args := make([]any, 0, 2*nMoved)
	for k := range ki.keys {
		if moved[k] {
			args = append(args, ki.args[k], tats[k].Int64)
		}
	}
	if _, err := tx.ExecContext(ctx, db.q(tatSQL.upsert(nMoved)), args...); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// spendKeys are the keys of a call's spends, each once in the order they
// first come (keys, and args, the same boxed once for the statements'
// arguments), and at, for each spend, the index of its key.
type spendKeys struct {
	keys []string
	args []any
	at   []int
}

// keyIndex is the spendKeys of spends. A new-order has a few distinct
// keys, found by comparing with those before; a map only for many.
func keyIndex(spends []LimitSpend) spendKeys {
	ki := spendKeys{keys: make([]string, 0, len(spends)), args: make([]any, 0, len(spends)), at: make([]int, len(spends))}
	var seen map[string]int
	if len(spends) > 16 {
		seen = make(map[string]int, len(spends))
	}
	for i, s := range spends {
		k := -1
		if seen != nil {
			if j, ok := seen[s.Key]; ok {
				k = j
			}
		} else {
			for j, key := range ki.keys {
				if key == s.Key {
					k = j
					break
				}
			}
		}
		if k < 0 {
			k = len(ki.keys)
			ki.keys, ki.args = append(ki.keys, s.Key), append(ki.args, s.Key)
			if seen != nil {
				seen[s.Key] = k
			}
		}
		ki.at[i] = k
	}
	return ki
}

// tatStatements are the texts of the two statements of spendDecided for a
// number of keys, built once for the few a new-order has.
type tatStatements struct {
	reads, upserts [9]string
}

var tatSQL = func() *tatStatements {
	t := &tatStatements{}
	for n := 1; n < len(t.reads); n++ {
		t.reads[n], t.upserts[n] = readTATsSQL(n), upsertTATsSQL(n)
	}
	return t
}()

// read is the unlocked read of n TATs: one row of one scalar subquery per
// key (see readTATs).
func (t *tatStatements) read(n int) string {
	if n < len(t.reads) {
		return t.reads[n]
	}
	return readTATsSQL(n)
}

// upsert writes n (key, TAT) pairs.
func (t *tatStatements) upsert(n int) string {
	if n < len(t.upserts) {
		return t.upserts[n]
	}
	return upsertTATsSQL(n)
}

func readTATsSQL(n int) string {
	const one = `(SELECT tat_ns FROM rate_limits WHERE key = ?)`
	return `SELECT ` + one + strings.Repeat(", "+one, n-1)
}

func upsertTATsSQL(n int) string {
	return `INSERT INTO rate_limits (key, tat_ns) VALUES (?, ?)` + strings.Repeat(", (?, ?)", n-1) + `
		ON CONFLICT (key) DO UPDATE SET tat_ns = excluded.tat_ns`
}

// LimitError is the refusal of a write that spends from rate limits (see
// CreateOrder) because one spend did not fit: the write did nothing.
// Decisions are those of its spends, in their order.
type LimitError struct {
	Decisions []LimitDecision
}

func (e *LimitError) Error() string { return "store: over a rate limit" }

// PruneLimits deletes up to batch buckets that are full again at now
// (their TAT has passed: the same as no row), returning how many.
//
// A bucket spent after the pick was read is kept: on PostgreSQL (READ
// COMMITTED) the DELETE waits for the spend's write and then checks the
// TAT again on the row it wrote, so a spend of another instance committed
// meanwhile is not forgotten (which would give its client a fresh burst).
func (db *DB) PruneLimits(ctx context.Context, now time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	res, err := db.lazyWr.ExecContext(ctx, db.q(`DELETE FROM rate_limits WHERE key IN
		(SELECT key FROM rate_limits WHERE tat_ns <= ? LIMIT ?) AND tat_ns <= ?`), now.UnixNano(), batch, now.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("store: pruning rate limits: %w", err)
	}
	return res.RowsAffected()
}

// gcra decides spend s of a bucket whose stored TAT is tat (0: none) at
// now, all in Unix nanoseconds, and returns the decision and the TAT the
// spend would leave.
func gcra(tat int64, s LimitSpend, now int64) (LimitDecision, int64) {
	emission := int64(s.Emission)
	tolerance := emission * s.Burst // how far ahead of now the TAT may run: the period
	newTAT := max(tat, now) + s.Cost*emission
	if s.Cost > s.Burst {
		// More than a full bucket holds never fits; wait for the refill
		// of a full bucket.
		return LimitDecision{RetryAfter: time.Duration(tolerance)}, tat
	}
	d := decide(newTAT, s, now)
	if !d.Allowed {
		return d, tat
	}
	return d, newTAT
}

// decide is the decision of spend s (at most a burst) that moves its
// bucket's TAT to newTAT at now: allowed when newTAT stays within the
// period (emission × burst) of now.
func decide(newTAT int64, s LimitSpend, now int64) LimitDecision {
	emission := int64(s.Emission)
	tolerance := emission * s.Burst
	if ahead := newTAT - now; ahead > tolerance {
		return LimitDecision{RetryAfter: time.Duration(ahead - tolerance)}
	}
	return LimitDecision{Allowed: true, Remaining: (tolerance - (newTAT - now)) / emission}
}

func checkSpends(spends []LimitSpend) error {
	if len(spends) > MaxLimitKeys {
		return fmt.Errorf("store: %d rate limit buckets in one spend, at most %d", len(spends), MaxLimitKeys)
	}
	for _, s := range spends {
		if s.PendingAuthzs && (s.Key == "" || s.Burst <= 0 || s.Burst > boundCountMask || s.Cost < 0) {
			return fmt.Errorf("store: pending authorizations cap %q: want a key, a cap between 1 and %d, and a cost of at least 0", Clip(s.Key, 64), boundCountMask)
		}
		if s.PendingAuthzs {
			continue
		}
		if s.Key == "" || len(s.Key) > 512 || s.Emission <= 0 || s.Burst <= 0 || s.Cost < 0 {
			return fmt.Errorf("store: rate limit bucket %q: want a key of at most 512 bytes, a positive emission interval and burst, and a cost of at least 0", Clip(s.Key, 64))
		}
	}
	return nil
}

// readTATs reads the stored TAT of each bucket of keys (distinct), by key;
// none for a bucket without a row. lock is "" or the dialect's row lock,
// to keep the rows read locked.
func readTATs(ctx context.Context, db *DB, tx *sql.Tx, keys []string, lock string) (map[string]int64, error) {
	tats := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return tats, nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	if lock != "" {
		err := scanTATs(ctx, tx, db.q(`SELECT key, tat_ns FROM rate_limits WHERE key IN (`+marks(len(keys))+`)`+lock), args, tats, nil)
		return tats, err
	}
	vals, err := readTATVals(ctx, db, tx, args)
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		if v.Valid {
			tats[keys[i]] = v.Int64
		}
	}
	return tats, nil
}

// readTATVals reads, unlocked, the stored TAT of the bucket of each key
// of keys (distinct, boxed as statement arguments), in their order; not
// Valid for a bucket without a row. It is one row of one scalar subquery
// per key: SQLite answers "key IN (...)" from a temporary index of the
// list that it builds on every call.
func readTATVals(ctx context.Context, db *DB, tx *sql.Tx, keys []any) ([]sql.NullInt64, error) {
	vals := make([]sql.NullInt64, len(keys))
	if len(keys) == 0 {
		return vals, nil
	}
	dest := make([]any, len(keys))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := tx.QueryRowContext(ctx, db.q(tatSQL.read(len(keys))), keys...).Scan(dest...); err != nil {
		return nil, err
	}
	return vals, nil
}

// readSpentTATs is readTATVals for a write that decides its spends from
// the TATs it reads, the TATs by the index of their key in ki. Where
// writes run one at a time (SQLite) that is a plain read. On PostgreSQL
// the buckets spent from are locked first, in the order of their keys (so
// that two such writes never wait for each other in a circle), by an
// upsert that leaves an existing row as it is and creates a missing one
// full (TAT 0, what no row means): a concurrent spender of the bucket
// then waits for this write, and two spenders of a bucket nobody has
// spent yet cannot both find it full. The upsert's rows are the TATs; the
// buckets only checked are read as readTATs reads them.
func (db *DB) readSpentTATs(ctx context.Context, tx *sql.Tx, spends []LimitSpend, ki spendKeys) ([]sql.NullInt64, error) {
	if db.dialect.rowLock() == "" {
		return readTATVals(ctx, db, tx, ki.args)
	}
	var spent []string
	seen := make(map[string]bool, len(spends))
	for _, s := range spends {
		if !s.CheckOnly && !seen[s.Key] {
			seen[s.Key] = true
			spent = append(spent, s.Key)
		}
	}
	var checked []string
	for _, k := range ki.keys {
		if !seen[k] {
			checked = append(checked, k)
		}
	}
	tats, err := readTATs(ctx, db, tx, checked, "")
	if err == nil && len(spent) > 0 {
		slices.Sort(spent)
		args := make([]any, len(spent))
		for i, k := range spent {
			args[i] = k
		}
		err = scanTATs(ctx, tx, db.q(`INSERT INTO rate_limits (key, tat_ns) VALUES (?, 0)`+strings.Repeat(", (?, 0)", len(spent)-1)+`
		ON CONFLICT (key) DO UPDATE SET tat_ns = rate_limits.tat_ns RETURNING key, tat_ns`), args, tats, nil)
	}
	if err != nil {
		return nil, err
	}
	vals := make([]sql.NullInt64, len(ki.keys))
	for i, k := range ki.keys {
		if tat, ok := tats[k]; ok {
			vals[i] = sql.NullInt64{Int64: tat, Valid: true}
		}
	}
	return vals, nil
}

// CountPendingAuthzs counts the authorizations of an account that are
// pending and not expired at now, and returns the soonest expiry among
// them (zero when there are none): the pending_authorizations cap.
func (db *DB) CountPendingAuthzs(ctx context.Context, accountID string, now time.Time) (int, time.Time, error) {
	var (
		n    int
		soon sql.NullInt64
	)
	err := db.r.QueryRowContext(ctx, db.q(`SELECT COUNT(*), MIN(expires_at) FROM authorizations
		WHERE account_id = ? AND status = 'pending' AND expires_at > ?`), accountID, now.UnixMilli()).Scan(&n, &soon)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("store: counting pending authorizations of %s: %w", accountID, err)
	}
	var at time.Time
	if soon.Valid {
		at = time.UnixMilli(soon.Int64)
	}
	return n, at, nil
}
