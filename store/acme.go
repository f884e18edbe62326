package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// NewID returns an identifier for an ACME resource: 16 bytes, 80 of them
// random (unguessable, so resource URLs leak nothing), after a 48-bit
// millisecond clock reading shifted by an offset each process draws at
// start (so an id does not tell when it was made). Lower-case base32 keeps
// it URL-safe and free of '-', so an id never reads as a flag when an
// operator passes it to `caddy acme-proxy`; its alphabet is in ASCII
// order, so ids sort as their bytes do.
//
// Ids made close together share their leading characters and sort next
// to each other: every index keyed by an id — an order's, its
// authorizations', challenges' and certificate's, and each child's
// reference to its parent — takes an issuance's rows on the pages the
// issuances before it wrote, instead of on a page of its own, all over
// the B-tree, that no cache holds once the database outgrows it. With
// random ids, an issuance wrote 21.6 WAL pages per order into a database
// of 200,000 orders and 16.9 into a small one; with these, 9.0 into both.
func NewID() string { return newID(uint64(time.Now().UnixMilli()) + idClockOffset) }

// newID is an id whose first 48 bits are clock's low ones.
func newID(clock uint64) string {
	var b [16]byte
	if _, err := rand.Read(b[6:]); err != nil {
		panic(fmt.Sprintf("store: crypto/rand failed: %v", err))
	}
	for i := 5; i >= 0; i-- {
		b[i] = byte(clock)
		clock >>= 8
	}
	return idEncoding.EncodeToString(b[:])
}

// idEncoding is base32 with an alphabet in ASCII order: a-z and 2-7, as
// ids were before they began with a clock reading.
var idEncoding = base32.NewEncoding("234567abcdefghijklmnopqrstuvwxyz").WithPadding(base32.NoPadding)

// idClockOffset shifts NewID's clock reading (modulo 2^48, its width).
var idClockOffset = func() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("store: crypto/rand failed: %v", err))
	}
	return binary.BigEndian.Uint64(b[:])
}()

// Secret returns the named server secret, creating it with size random
// bytes the first time. Every instance on the database gets the same value.
//
// At READ COMMITTED: the insert of a missing secret waits for a concurrent
// one of the same name and then does nothing, and the read after it sees
// the row that won.
func (db *DB) Secret(ctx context.Context, name string, size int, now time.Time) ([]byte, error) {
	fresh := make([]byte, size)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("store: generating secret %s: %w", name, err)
	}
	var val []byte
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`),
			name, fresh, now.UnixMilli()); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, db.q(`SELECT value FROM secrets WHERE name = ?`), name).Scan(&val)
	})
	if err != nil {
		return nil, fmt.Errorf("store: secret %s: %w", name, err)
	}
	return val, nil
}

// ---- Accounts ----

// Account is an ACME account (RFC 8555 §7.1.2) in one profile.
type Account struct {
	ID         string
	Profile    string
	Thumbprint string      // RFC 7638 thumbprint of the account key, base64url
	KeyJWK     []byte      // the account's public key as a JWK
	Status     acme.Status // valid, deactivated, revoked
	Contact    []string
	TOSAgreed  bool
	CreatedAt  time.Time
	// EABKID and EABLabel are the external account binding the account
	// was created with (RFC 8555 §7.3.4): the key's id and its label;
	// both "" without one.
	EABKID   string
	EABLabel string
}

const accountCols = `id, profile, key_thumbprint, key_jwk, status, contact, tos_agreed, created_at, eab_kid, eab_label`

// accountByID reads one account of a profile, by its key alone (see
// "Rows read by their key" in dialect.go).
const accountByID = `SELECT ` + accountCols + ` FROM accounts WHERE (profile = ?) IS TRUE AND id = ?`

func scanAccount(r rowScanner) (Account, error) {
	var (
		a       Account
		jwk     string
		contact string
		tos     int
		created int64
	)
	if err := r.Scan(&a.ID, &a.Profile, &a.Thumbprint, &jwk, &a.Status, &contact, &tos, &created, &a.EABKID, &a.EABLabel); err != nil {
		return Account{}, err
	}
	a.KeyJWK, a.TOSAgreed, a.CreatedAt = []byte(jwk), tos != 0, ms(created)
	if contact == "[]" {
		// Most accounts have none: what Unmarshal would give, without it
		// (an account is read with every signed request).
		a.Contact = []string{}
	} else if err := json.Unmarshal([]byte(contact), &a.Contact); err != nil {
		return Account{}, fmt.Errorf("store: account %s contact: %w", a.ID, err)
	}
	return a, nil
}

// readErr turns a single-row read's error into ErrNotFound or a wrapped
// fault naming what was read.
func readErr(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	return nil
}

// CreateAccount stores a new account, or returns the existing account with
// the same key in the profile (created=false). A new account gets a.ID when
// set, else a fresh NewID. jobs (the notifications a new account owes) are
// stored in the same transaction, only when the account is created.
//
// An account with a.EABKID set binds that external account key in the
// same transaction (see bindEABKey): a key that binds nothing more — not
// of the profile, revoked, expired at now, or single-use and bound — fails
// the whole creation with ErrWrongState, so two registrations racing for a
// single-use key bind it once.
//
// At READ COMMITTED: the insert is guarded by the unique key (a concurrent
// creation with the same key waits, then conflicts), the EAB binding is a
// guarded update (see bindEABKey), and the read of an existing account
// comes after the insert that found it.
func (db *DB) CreateAccount(ctx context.Context, a Account, now time.Time, jobs ...NewJob) (Account, bool, error) {
	return db.createAccount(ctx, a, now, nil, nil, jobs)
}

// CreateAccountAudited is CreateAccount that spends spends from their rate
// limit buckets and writes ev, with its jobs, in the account's own write,
// only when it creates the account (ev.AccountID is set to the new
// account's id; ev.At is its creation time). When a spend does not fit,
// nothing is written and the error is a *LimitError. A key that has an
// account already spends nothing and writes no row (a concurrent creation
// with the same key is waited for, see CreateAccount), so registrations
// racing with one key are never refused for the account only one of them
// makes.
func (db *DB) CreateAccountAudited(ctx context.Context, a Account, spends []LimitSpend, ev AuditEvent) (Account, bool, error) {
	return db.createAccount(ctx, a, ev.At, spends, &ev, nil)
}

func (db *DB) createAccount(ctx context.Context, a Account, now time.Time, spends []LimitSpend, ev *AuditEvent, jobs []NewJob) (Account, bool, error) {
	if err := checkSpends(spends); err != nil {
		return Account{}, false, err
	}
	contact, err := json.Marshal(nonNil(a.Contact))
	if err != nil {
		return Account{}, false, fmt.Errorf("store: account contact: %w", err)
	}
	tos := 0
	if a.TOSAgreed {
		tos = 1
	}
	var created bool
	id := a.ID
	if id == "" {
		id = NewID()
	}
	err = db.withTx(ctx, func(tx *sql.Tx) error {
		created = false // fn may run again (see engine)
		got, err := scanAccount(tx.QueryRowContext(ctx, db.q(`INSERT INTO accounts
			(id, profile, key_thumbprint, key_jwk, status, contact, tos_agreed, created_at, updated_at, eab_kid, eab_label)
			VALUES (?, ?, ?, ?, 'valid', ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING RETURNING `+accountCols),
			id, a.Profile, a.Thumbprint, string(a.KeyJWK), string(contact), tos, now.UnixMilli(), now.UnixMilli(), a.EABKID, a.EABLabel))
		if err == nil {
			a, created = got, true
			if out, ok, err := db.spendTx(ctx, tx, spends, now); err != nil {
				return err
			} else if !ok {
				return &LimitError{Decisions: out}
			}
			if a.EABKID != "" {
				if err := db.bindEABKey(ctx, tx, a.Profile, a.EABKID, a.ID, now); err != nil {
					return err
				}
			}
			if ev != nil {
				e := *ev
				e.AccountID = a.ID
				if err := db.insertAudit(ctx, tx, e); err != nil {
					return err
				}
			}
			return db.enqueueAll(ctx, tx, jobs, now)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		a, err = scanAccount(tx.QueryRowContext(ctx, db.q(`SELECT `+accountCols+` FROM accounts WHERE profile = ? AND key_thumbprint = ?`),
			a.Profile, a.Thumbprint))
		return err
	})
	if _, over := errors.AsType[*LimitError](err); over || errors.Is(err, ErrWrongState) {
		return Account{}, false, err
	}
	if err != nil {
		return Account{}, false, fmt.Errorf("store: creating account: %w", err)
	}
	return a, created, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// GetAccount reads an account of a profile by id.
func (db *DB) GetAccount(ctx context.Context, profile, id string) (Account, error) {
	if !holdable(id) {
		return Account{}, fmt.Errorf("%w: account %q", ErrNotFound, id)
	}
	a, err := scanAccount(db.r.QueryRowContext(ctx, db.q(accountByID), profile, id))
	return a, readErr(err, "account "+id)
}

// AccountByKey finds an account of a profile by its key thumbprint.
func (db *DB) AccountByKey(ctx context.Context, profile, thumbprint string) (Account, error) {
	a, err := scanAccount(db.r.QueryRowContext(ctx, db.q(`SELECT `+accountCols+` FROM accounts WHERE profile = ? AND key_thumbprint = ?`), profile, thumbprint))
	return a, readErr(err, "account by key")
}

// UpdateAccountContact replaces a valid account's contact list.
func (db *DB) UpdateAccountContact(ctx context.Context, id string, contact []string, now time.Time) (Account, error) {
	c, err := json.Marshal(nonNil(contact))
	if err != nil {
		return Account{}, fmt.Errorf("store: account contact: %w", err)
	}
	return db.accountUpdate(ctx, id, `contact = ?, updated_at = ?`, string(c), now.UnixMilli())
}

// DeactivateAccount moves a valid account to deactivated (RFC 8555 §7.3.6)
// without an audit row; requests and operators go through
// DeactivateAccountAudited.
func (db *DB) DeactivateAccount(ctx context.Context, id string, now time.Time) (Account, error) {
	return db.accountUpdate(ctx, id, `status = 'deactivated', updated_at = ?`, now.UnixMilli())
}

// accountUpdate changes a valid account; ErrWrongState if it is not valid.
//
// One guarded statement: PostgreSQL re-checks status on the account's
// newest row.
func (db *DB) accountUpdate(ctx context.Context, id, set string, args ...any) (Account, error) {
	a, err := scanAccount(db.wr.QueryRowContext(ctx, db.q(`UPDATE accounts SET `+set+` WHERE id = ? AND status = 'valid' RETURNING `+accountCols),
		append(args, id)...))
	if errors.Is(err, sql.ErrNoRows) {
		return Account{}, fmt.Errorf("%w: account %s is not valid", ErrWrongState, id)
	}
	if err != nil {
		return Account{}, fmt.Errorf("store: updating account %s: %w", id, err)
	}
	return a, nil
}

// ChangeAccountKey replaces a valid account's key (RFC 8555 §7.3.5),
// guarded on the old key. ErrConflict if the new key already belongs to an
// account of the profile.
//
// One guarded statement, the unique key refusing a key another account
// took at once.
func (db *DB) ChangeAccountKey(ctx context.Context, id, oldThumb, newThumb string, newJWK []byte, now time.Time) (Account, error) {
	a, err := scanAccount(db.wr.QueryRowContext(ctx, db.q(`UPDATE accounts SET key_thumbprint = ?, key_jwk = ?, updated_at = ?
		WHERE id = ? AND key_thumbprint = ? AND status = 'valid' RETURNING `+accountCols),
		newThumb, string(newJWK), now.UnixMilli(), id, oldThumb))
	switch {
	case err != nil && db.dialect.uniqueViolation(err):
		return Account{}, fmt.Errorf("%w: the new key belongs to another account", ErrConflict)
	case errors.Is(err, sql.ErrNoRows):
		return Account{}, fmt.Errorf("%w: account %s is not valid or its key changed", ErrWrongState, id)
	case err != nil:
		return Account{}, fmt.Errorf("store: changing key of account %s: %w", id, err)
	}
	return a, nil
}

// AccountOrderIDs lists an account's order ids, newest first, after the
// given cursor (an order id; "" for the first page), leaving out the
// orders that are invalid as of now (RFC 8555 §7.1.2.1: the list SHOULD
// NOT include them) — those whose row says so and the pending or ready
// ones past their expiry, as the order itself answers.
func (db *DB) AccountOrderIDs(ctx context.Context, accountID, after string, now time.Time, limit int) ([]string, error) {
	if !holdable(after) {
		return nil, nil // a cursor no order has: nothing is after it
	}
	const live = ` AND o.status <> 'invalid' AND (o.status NOT IN ('pending','ready') OR o.expires_at > ?)`
	stmt := `SELECT o.id FROM orders o WHERE o.account_id = ?` + live + ` ORDER BY o.created_at DESC, o.id DESC LIMIT ?`
	args := []any{accountID, now.UnixMilli(), limit}
	if after != "" {
		stmt = `SELECT o.id FROM orders o, orders c WHERE c.id = ? AND o.account_id = ?` + live + `
			AND (o.created_at < c.created_at OR (o.created_at = c.created_at AND o.id < c.id))
			ORDER BY o.created_at DESC, o.id DESC LIMIT ?`
		args = []any{after, accountID, now.UnixMilli(), limit}
	}
	rows, err := db.r.QueryContext(ctx, db.q(stmt), args...)
	if err != nil {
		return nil, fmt.Errorf("store: listing orders of %s: %w", accountID, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: listing orders of %s: %w", accountID, err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// ---- Nonces ----

// UseNonce records a nonce as used. It reports false if it was used before.
//
// The record is a lazy write (see engine): it survives a crash of the
// process at once, and a crash of the machine together with whatever the
// request it came with writes next. A power loss can forget only the
// nonces of requests whose effects it forgets too, so a replay can never
// repeat an effect that is on disk.
//
// The unique key makes a nonce spent once, whatever the isolation: a
// concurrent spender of it waits and then conflicts.
func (db *DB) UseNonce(ctx context.Context, nonce string, expires time.Time) (fresh bool, err error) {
	// One statement, a lazy write of its own: on PostgreSQL one round trip.
	res, err := db.lazyWr.ExecContext(ctx, db.q(spendNonce), nonceKey(expires, nonce))
	if err != nil {
		return false, fmt.Errorf("store: using nonce: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: using nonce: %w", err)
	}
	return n == 1, nil
}

// spendNonce records a nonce's key as used; it affects no row when the
// key is there already.
const spendNonce = `INSERT INTO used_nonces (k) VALUES (?) ON CONFLICT DO NOTHING`

// spendNonce records a nonce as used in tx and reports whether it was
// fresh.
func (db *DB) spendNonce(ctx context.Context, tx *sql.Tx, nonce string, expires time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, db.q(spendNonce), nonceKey(expires, nonce))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// UseNonceAs is UseNonce for a request signed by an account (kid): in the
// same lazy write it reads that account of profile, so the caller checks
// the key it verified the signature with, and the account's status,
// against the row as it stands when the nonce is spent. The writer's
// connection reads it from a warm page cache, where a reader connection
// would start cold after every write; a request signed by a key the
// account no longer has is caught here, however the caller came by that
// key. ErrNotFound when the account does not exist (the nonce is spent
// all the same); fresh is false, with no account, for a used nonce.
//
// The account read after the nonce is the row as committed when the read
// runs; a later change of the account (its key, its status) is read by the
// request's next one.
//
// Where the dialect has one statement for both (spendNonceAs: PostgreSQL,
// one round trip instead of a transaction's four) it is sent as a lazy
// write of its own; it reads the account also for a used nonce, and
// drops it. A request's first read named in ctx (WithFirstRead) is made
// with the spend.
func (db *DB) UseNonceAs(ctx context.Context, nonce string, expires time.Time, profile, accountID string) (acct Account, fresh bool, err error) {
	fr := firstReadOf(ctx)
	if fr != nil && !holdable(fr.id) {
		fr = nil // its Get method finds nothing without a statement
	}
	found := true
	e, pg := db.eng.(*postgresEngine)
	switch stmt := db.dialect.spendNonceAs(); {
	case pg && fr != nil:
		acct, fresh, found, err = db.useNonceReading(ctx, e, fr, stmt, nonceKey(expires, nonce), profile, accountID)
	case stmt != "":
		acct, err = scanAccount(appendDest{db.lazyWr.QueryRowContext(ctx, db.q(stmt), nonceKey(expires, nonce), profile, accountID),
			[]any{&fresh, &found}})
	default:
		err = db.withLazyTx(ctx, func(tx *sql.Tx) error {
			found = true // fn may run again (see engine)
			var err error
			if fresh, err = db.spendNonce(ctx, tx, nonce, expires); err != nil || !fresh {
				return err
			}
			acct, err = scanAccount(tx.QueryRowContext(ctx, db.q(accountByID), profile, accountID))
			if errors.Is(err, sql.ErrNoRows) {
				found = false // not an error here: that would undo the nonce
				return nil
			}
			if err != nil || fr == nil {
				return err
			}
			query, args := fr.query(db, profile)
			rows, err := tx.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			fr.scan(rows, discard)
			return rows.Err()
		})
	}
	if err != nil || !fresh || !found {
		fr.drop()
	}
	switch {
	case err != nil:
		return Account{}, false, fmt.Errorf("store: using nonce: %w", err)
	case !fresh:
		return Account{}, false, nil
	case !found:
		return Account{}, true, fmt.Errorf("%w: account %s", ErrNotFound, accountID)
	}
	return acct, true, nil
}

// useNonceReading is UseNonceAs on PostgreSQL for a request that names
// its first read (see FirstRead): spendNonceAs (stmt) and that read in one
// pipeline, one round trip. The read is a statement after the spend, with
// a snapshot of its own; UseNonceAs keeps it only when the nonce was fresh
// and the account found, the request's signature then held against the
// key read.
func (db *DB) useNonceReading(ctx context.Context, e *postgresEngine, fr *FirstRead, stmt string, key []byte, profile, accountID string) (acct Account, fresh, found bool, err error) {
	query, args := fr.query(db, profile)
	b := &pgx.Batch{}
	b.Queue(db.q(stmt), key, profile, accountID)
	b.Queue(query, args...)
	err = e.pipeline(ctx, true, b, func(br pgx.BatchResults) error {
		fresh, found = false, false // the pipeline may run again
		var err error
		if acct, err = scanAccount(appendDest{br.QueryRow(), []any{&fresh, &found}}); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		fr.scan(rows, skipPgx)
		return rows.Err()
	})
	return acct, fresh, found, err
}

// skipPgx is n destinations pgx drops a column into.
func skipPgx(n int) []any { return make([]any, n) }

// nonceKey orders used nonces by expiry: 8 bytes of big-endian Unix
// milliseconds, then the nonce. A nonce always carries the same expiry, so
// the key is as unique as the nonce.
func nonceKey(expires time.Time, nonce string) []byte {
	k := make([]byte, 8, 8+len(nonce))
	binary.BigEndian.PutUint64(k, uint64(expires.UnixMilli()))
	return append(k, nonce...)
}

// NonceSweepMargin is how long past its expiry, in the sweeping
// instance's clock, a spent nonce's record is kept. Every instance reads a
// nonce's expiry in its own clock, and only the record refuses a replay:
// one whose clock runs behind the sweeper's would otherwise take a nonce
// spent and swept as fresh for as long as it runs behind.
const NonceSweepMargin = 10 * time.Minute

// PruneNonces forgets used nonces that have expired anyway: every key
// below the expiry prefix of now less NonceSweepMargin, in batches of
// sweepBatch, each its own write (see deleteInBatches). It returns how
// many it forgot.
//
// Each batch is one statement deleting expired keys, which nothing writes
// again, lowest first, found by the primary key.
func (db *DB) PruneNonces(ctx context.Context, now time.Time) (int64, error) {
	n, err := db.deleteInBatches(ctx, `DELETE FROM used_nonces WHERE k IN
		(SELECT k FROM used_nonces WHERE k < ? ORDER BY k LIMIT ?)`, nonceKey(now.Add(-NonceSweepMargin), ""))
	if err != nil {
		return n, fmt.Errorf("store: pruning nonces: %w", err)
	}
	return n, nil
}
