package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// EABKey is an external account binding key (RFC 8555 §7.3.4) of one
// profile, minted by an operator. HMACKey is the MAC key itself: only
// EABKeyForBinding reads it back, for verifying a binding; listings leave
// it empty.
type EABKey struct {
	KID      string
	Profile  string
	Label    string
	HMACKey  []byte
	Reusable bool // binds any number of accounts, not one
	Created  time.Time
	Expires  time.Time // zero: never
	Revoked  time.Time // zero: not revoked
	Used     time.Time // zero: never bound an account
	// BoundAccount is the last account the key bound; BoundCount how many.
	BoundAccount string
	BoundCount   int
}

// EABState is what an EAB key can still do, for listings.
type EABState string

// The states of an EAB key.
const (
	EABUnused  EABState = "unused"  // binds an account when presented
	EABBound   EABState = "bound"   // single-use and used: binds nothing new
	EABInUse   EABState = "in_use"  // reusable and used: still binds
	EABRevoked EABState = "revoked" // binds nothing new
	EABExpired EABState = "expired" // binds nothing new
)

// State is the key's state at now.
func (k EABKey) State(now time.Time) EABState {
	switch {
	case !k.Revoked.IsZero():
		return EABRevoked
	case !k.Expires.IsZero() && !now.Before(k.Expires):
		return EABExpired
	case k.BoundCount > 0 && !k.Reusable:
		return EABBound
	case k.BoundCount > 0:
		return EABInUse
	}
	return EABUnused
}

const eabCols = `kid, profile, label, reusable, created_at, expires_at, revoked_at, used_at, bound_account, bound_count`

func scanEABKey(r rowScanner, extra ...any) (EABKey, error) {
	var (
		k                                 EABKey
		reusable                          int
		created, expires, revoked, usedAt int64
	)
	dest := append([]any{&k.KID, &k.Profile, &k.Label, &reusable, &created, &expires, &revoked, &usedAt,
		&k.BoundAccount, &k.BoundCount}, extra...)
	if err := r.Scan(dest...); err != nil {
		return EABKey{}, err
	}
	k.Reusable, k.Created = reusable != 0, ms(created)
	k.Expires, k.Revoked, k.Used = msOrZero(expires), msOrZero(revoked), msOrZero(usedAt)
	return k, nil
}

// msOrZero is ms, with 0 as the zero time (never).
func msOrZero(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return ms(v)
}

// msOrNever is a time as stored: Unix ms, 0 for the zero time.
func msOrNever(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// CreateEABKey stores a newly minted key. A kid already taken is
// ErrConflict.
//
// One insert, the primary key refusing a taken id.
func (db *DB) CreateEABKey(ctx context.Context, k EABKey) error {
	_, err := db.wr.ExecContext(ctx, db.q(insertEABKey), eabKeyRow(k)...)
	return db.createEABKeyErr(err)
}

// CreateEABKeyAudited is CreateEABKey with ev, the audit row of the
// minting, written in the same transaction: a key that binds accounts is
// never stored without the row saying who minted it.
func (db *DB) CreateEABKeyAudited(ctx context.Context, k EABKey, ev AuditEvent) error {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(insertEABKey), eabKeyRow(k)...); err != nil {
			return err
		}
		if err := db.insertAudit(ctx, tx, ev); err != nil {
			return fmt.Errorf("writing audit event %s: %w", ev.Event, err)
		}
		return nil
	})
	return db.createEABKeyErr(err)
}

const insertEABKey = `INSERT INTO eab_keys (kid, profile, label, hmac_key, reusable, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`

// eabKeyRow is the values of k's row, in insertEABKey's order.
func eabKeyRow(k EABKey) []any {
	reusable := 0
	if k.Reusable {
		reusable = 1
	}
	return []any{k.KID, k.Profile, k.Label, k.HMACKey, reusable, k.Created.UnixMilli(), msOrNever(k.Expires)}
}

// createEABKeyErr is the error of a key's insert as callers see it.
func (db *DB) createEABKeyErr(err error) error {
	if err != nil && db.dialect.uniqueViolation(err) {
		return fmt.Errorf("%w: EAB key id taken", ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("store: creating EAB key: %w", err)
	}
	return nil
}

// EABKeyForBinding reads a key of a profile with its MAC key, for
// verifying a binding. An unknown kid, or one of another profile, is
// ErrNotFound.
func (db *DB) EABKeyForBinding(ctx context.Context, profile, kid string) (EABKey, error) {
	if !holdable(kid) {
		return EABKey{}, fmt.Errorf("%w: EAB key %q", ErrNotFound, kid)
	}
	var mac []byte
	k, err := scanEABKey(db.r.QueryRowContext(ctx, db.q(`SELECT `+eabCols+`, hmac_key FROM eab_keys WHERE profile = ? AND kid = ?`),
		profile, kid), &mac)
	if err != nil {
		return EABKey{}, readErr(err, "EAB key")
	}
	k.HMACKey = mac
	return k, nil
}

// EABKeyFilter selects a profile's EAB keys for operators.
type EABKeyFilter struct {
	Profile string
	After   string // page: keys listed after this key id
	Limit   int    // default 100, at most 1000
}

// ListEABKeys returns a page of a profile's keys, newest first, without
// their MAC keys.
func (db *DB) ListEABKeys(ctx context.Context, f EABKeyFilter) ([]EABKey, error) {
	if !allHoldable(f.Profile, f.After) {
		return nil, nil // see holdable
	}
	stmt := `SELECT ` + eabCols + ` FROM eab_keys k WHERE profile = ?`
	args := []any{f.Profile}
	if f.After != "" {
		// A row value, as the orders list's page: no rows when the key
		// named does not exist.
		stmt += ` AND (k.created_at, k.kid) < (SELECT p.created_at, p.kid FROM eab_keys p WHERE p.kid = ?)`
		args = append(args, f.After)
	}
	stmt += ` ORDER BY created_at DESC, kid DESC LIMIT ?`
	rows, err := db.r.QueryContext(ctx, db.q(stmt), append(args, PageLimit(f.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("store: listing EAB keys: %w", err)
	}
	defer rows.Close()
	var out []EABKey
	for rows.Next() {
		k, err := scanEABKey(rows)
		if err != nil {
			return nil, fmt.Errorf("store: listing EAB keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeEABKey revokes a key of a profile at now: it binds no new account;
// accounts it bound keep their binding. ErrNotFound for an unknown kid,
// ErrWrongState for one already revoked.
//
// One guarded statement; the read after a refusal only explains it.
func (db *DB) RevokeEABKey(ctx context.Context, profile, kid string, now time.Time) (EABKey, error) {
	return db.RevokeEABKeyAudited(ctx, profile, kid, now, nil)
}

// RevokeEABKeyAudited is RevokeEABKey with the audit row audit makes of
// the key as revoked, written in the same transaction: the revocation and
// the row saying who revoked are stored together or not at all. A nil
// audit writes no row.
func (db *DB) RevokeEABKeyAudited(ctx context.Context, profile, kid string, now time.Time, audit func(EABKey) AuditEvent) (EABKey, error) {
	if !allHoldable(profile, kid) {
		return EABKey{}, fmt.Errorf("%w: EAB key %q", ErrNotFound, kid)
	}
	var k EABKey
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		k, err = scanEABKey(tx.QueryRowContext(ctx, db.q(`UPDATE eab_keys SET revoked_at = ?
			WHERE profile = ? AND kid = ? AND revoked_at = 0 RETURNING `+eabCols), now.UnixMilli(), profile, kid))
		if err != nil || audit == nil {
			return err
		}
		ev := audit(k)
		if err := db.insertAudit(ctx, tx, ev); err != nil {
			return fmt.Errorf("writing audit event %s: %w", ev.Event, err)
		}
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		if _, gerr := db.EABKeyForBinding(ctx, profile, kid); gerr != nil {
			return EABKey{}, gerr
		}
		return EABKey{}, fmt.Errorf("%w: EAB key already revoked", ErrWrongState)
	}
	if err != nil {
		return EABKey{}, fmt.Errorf("store: revoking EAB key: %w", err)
	}
	return k, nil
}

// bindEABKey records, in the account's creation transaction, that key kid
// of profile bound account at now; ErrWrongState when the key binds
// nothing new (revoked, expired, or single-use and bound), or is not the
// profile's. The condition and the update are one statement, so a
// single-use key is bound once however many registrations race for it.
//
// One guarded statement: PostgreSQL re-checks bound_count on the key's
// newest row, so two registrations racing for a single-use key bind it
// once.
func (db *DB) bindEABKey(ctx context.Context, tx *sql.Tx, profile, kid, account string, now time.Time) error {
	res, err := tx.ExecContext(ctx, db.q(`UPDATE eab_keys SET used_at = ?, bound_account = ?, bound_count = bound_count + 1
		WHERE profile = ? AND kid = ? AND revoked_at = 0 AND (expires_at = 0 OR expires_at > ?)
		AND (reusable = 1 OR bound_count = 0)`),
		now.UnixMilli(), account, profile, kid, now.UnixMilli())
	if err != nil {
		return fmt.Errorf("store: binding EAB key: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("store: binding EAB key: %w", err)
	} else if n == 0 {
		return fmt.Errorf("%w: the EAB key binds no new account", ErrWrongState)
	}
	return nil
}

// EABKeyProfile is the profile of key kid; ErrNotFound for an unknown kid.
func (db *DB) EABKeyProfile(ctx context.Context, kid string) (string, error) {
	if !holdable(kid) {
		return "", fmt.Errorf("%w: EAB key %q", ErrNotFound, kid)
	}
	var p string
	err := db.r.QueryRowContext(ctx, db.q(`SELECT profile FROM eab_keys WHERE kid = ?`), kid).Scan(&p)
	return p, readErr(err, "EAB key "+kid)
}

// AccountEABLabels returns the binding labels of those of ids whose
// account has one, by account id: for showing audit rows, which name an
// account, with the label it was bound under.
func (db *DB) AccountEABLabels(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	marks := make([]string, len(ids))
	for i, id := range ids {
		args[i], marks[i] = id, "?"
	}
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT id, eab_label FROM accounts WHERE eab_label <> '' AND id IN (`+
		strings.Join(marks, ", ")+`)`), args...)
	if err != nil {
		return nil, fmt.Errorf("store: account EAB labels: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, label string
		if err := rows.Scan(&id, &label); err != nil {
			return nil, fmt.Errorf("store: account EAB labels: %w", err)
		}
		out[id] = label
	}
	return out, rows.Err()
}
