package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLiteOptions tunes an embedded SQLite store. The zero value is a safe
// default.
type SQLiteOptions struct {
	// BusyTimeout is how long a statement waits for another process's write
	// lock before failing. Default 10s.
	BusyTimeout time.Duration
	// Readers is the size of the read-only connection pool. Default 4.
	Readers int
	// Synchronous is SQLite's synchronous pragma: "FULL" (default) makes
	// every commit durable across power loss; "NORMAL" keeps the database
	// consistent and survives a process crash, but may lose the last
	// commits if the machine loses power.
	Synchronous string
	// MaxPages, when set, bounds the database file to that many pages
	// (PRAGMA max_page_count; pages are 4 KiB): past it, writes fail as on
	// a full disk (ErrUnavailable) while reads go on. Zero: no bound.
	MaxPages int

	// observe is told every statement the store's connections run (see
	// cachingConnector); for tests.
	observe func(query string)
	// observeWrites is told every statement the writer connection runs,
	// each time it runs, and observeCommit every commit of the group
	// commit (see groupCommit.observe); for tests that count what an
	// issuance writes.
	observeWrites func(query string)
	observeCommit func(writes int, lazy bool)
	observeHold   func(writes int, d time.Duration)
}

// OpenSQLite opens (creating if needed) the SQLite database at path, brings
// its schema up to date, and returns the store. A database whose schema is
// newer than this binary is refused (ErrSchemaTooNew) and left untouched.
func OpenSQLite(ctx context.Context, path string, opts SQLiteOptions) (*DB, error) {
	db, err := PrepareSQLite(path, opts)
	if err != nil {
		return nil, err
	}
	return open(ctx, db)
}

// PrepareSQLite builds the closed store of the SQLite database at path
// (see DB): its options are checked, and nothing is created or opened
// until Open.
func PrepareSQLite(path string, opts SQLiteOptions) (*DB, error) {
	if path == "" {
		return nil, errors.New("store: sqlite path is empty")
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.Readers <= 0 {
		opts.Readers = 4
	}
	switch opts.Synchronous {
	case "":
		opts.Synchronous = "FULL"
	case "FULL", "NORMAL":
	default:
		return nil, fmt.Errorf("store: synchronous must be FULL or NORMAL, not %q", opts.Synchronous)
	}
	connectable := new(atomic.Bool)

	// Writes: one connection. Writers serialize on the database lock
	// anyway, and one connection turns lock contention inside this process
	// into a queue (the group commit's) instead of SQLITE_BUSY retries.
	wc, err := newCachingConnector(sqliteDSN(path, opts, false), opts.observe)
	if err != nil {
		return nil, err
	}
	wc.everyRun = opts.observeWrites
	wc.gate = func() error { return gatedConnect(connectable, path) }
	w := sql.OpenDB(wc)
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	rc, err := newCachingConnector(sqliteDSN(path, opts, true), opts.observe)
	if err != nil {
		w.Close()
		return nil, err
	}
	rc.gate = wc.gate
	r := sql.OpenDB(rc)
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	r.SetConnMaxIdleTime(0)

	gc := newGroupCommit(w, opts.Synchronous)
	gc.observe = opts.observeCommit
	gc.observeHold = opts.observeHold
	prepare := func(ctx context.Context) error {
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("store: creating directory for %s: %w", path, err)
			}
		}
		// The schema check happens on a read-only handle first, so a
		// database from a newer binary is not even switched to WAL by us.
		if err := refuseNewerSchema(ctx, path, opts, sqliteDialect{}, false); err != nil {
			return err
		}
		return restrictFile(path)
	}
	check := func(ctx context.Context) error {
		if err := creatable(path); err != nil {
			return err
		}
		return refuseNewerSchema(ctx, path, opts, sqliteDialect{}, true)
	}
	return newDB(r, &sqliteEngine{w: w, gc: gc}, sqliteDialect{}, path, connectable, prepare, check), nil
}

// restrictFile keeps the database, which holds secrets (the nonce and
// CSRF keys, EAB MAC keys, relay account keys), from other users: a new
// file is created 0600 before SQLite opens it, so that its -wal and -shm,
// which SQLite creates with the database's mode, are 0600 too; an
// existing one (and its -wal and -shm, when there) loses any access for
// others, such as the 0644 an earlier version left, keeping its owner's
// and group's.
func restrictFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("store: creating %s: %w", path, err)
		}
		return nil
	}
	if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("store: creating %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) && p != path {
			continue
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if mode := fi.Mode().Perm(); mode&0o007 != 0 {
			if err := os.Chmod(p, mode&^0o007); err != nil {
				return fmt.Errorf("store: taking %s from other users: %w", p, err)
			}
		}
	}
	return nil
}

// sqliteDSN builds a modernc.org/sqlite DSN. _txlock=immediate makes every
// explicit transaction take the write lock at BEGIN, so a transaction that
// reads then writes cannot fail half-way with a stale snapshot.
func sqliteDSN(path string, opts SQLiteOptions, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous("+opts.Synchronous+")")
	if opts.MaxPages > 0 {
		q.Add("_pragma", fmt.Sprintf("max_page_count(%d)", opts.MaxPages))
	}
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// refuseNewerSchema looks at an existing SQLite file through a read-only
// handle, so that a database written by a newer binary is refused before
// this binary changes anything in it (not even its journal mode).
//
// lookOnly is Check's look, which must leave no file behind either: a
// read-only handle on a database in WAL mode creates its -wal and -shm
// when they are missing. They are missing when no process has the
// database open, and then every commit is in the main file: it is read
// as immutable, without locks, -wal or -shm.
func refuseNewerSchema(ctx context.Context, path string, opts SQLiteOptions, d dialect, lookOnly bool) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	if _, err := os.Stat(path + "-wal"); lookOnly && errors.Is(err, os.ErrNotExist) {
		q.Set("immutable", "1")
	}
	ro, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("store: opening %s read-only: %w", path, err)
	}
	defer ro.Close()
	var tables int
	if err := ro.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&tables); err != nil {
		return fmt.Errorf("store: reading %s: %w", path, err)
	}
	if tables == 0 {
		return nil
	}
	var current sql.NullInt64
	if err := ro.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("store: reading schema version of %s: %w", path, err)
	}
	if known := len(d.migrations()); int(current.Int64) > known {
		return tooNew(path, int(current.Int64), known)
	}
	return nil
}

// sqliteEngine is SQLite's write engine: the single writer connection w,
// with its statement cache (cachingConnector), behind a group commit.
type sqliteEngine struct {
	w  *sql.DB
	gc *groupCommit
}

func (e *sqliteEngine) do(ctx context.Context, fn func(*sql.Tx) error, lazy bool) error {
	return e.gc.do(ctx, fn, lazy)
}

func (e *sqliteEngine) close() error {
	e.gc.stop()
	return e.w.Close()
}

type sqliteDialect struct{}

func (sqliteDialect) name() string              { return "sqlite" }
func (sqliteDialect) migrations() []migration   { return sqliteMigrations }
func (sqliteDialect) rebind(stmt string) string { return stmt }

// unavailable: SQLITE_FULL (the disk, or max_page_count), SQLITE_READONLY,
// SQLITE_IOERR and SQLITE_CANTOPEN, with their extended codes.
func (sqliteDialect) unavailable(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
		return true
	}
	return false
}

func (sqliteDialect) uniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// claimJobs needs no row locks: the group commit is the only writer, so
// the subquery's pick and the update are one step for every claimer.
//
// The due jobs and the owed abandons are two selects, each served by its
// index (jobs_due, the partial jobs_abandon_owed), the abandons first: an
// OR of the two would have the planner read every job of the kind.
func (sqliteDialect) claimJobs(cols, lanes string) string {
	return `UPDATE jobs
		SET status = CASE WHEN status = 'cancelled' THEN status ELSE 'running' END,
		    attempts = CASE WHEN status = 'cancelled' THEN attempts ELSE attempts + 1 END,
		    rerun_at = NULL,
		    lease_owner = ?, lease_until = ?, updated_at = ?
		WHERE id IN (SELECT id FROM (
			SELECT id, 0 AS owed, run_at FROM jobs
			WHERE kind = ? AND status IN ('ready','running') AND lane IN (` + lanes + `) AND ((status = 'ready' AND run_at <= ?) OR (status = 'running' AND lease_until <= ? AND lease_owner <> ?))
			UNION ALL
			SELECT id, 1, run_at FROM jobs
			WHERE ` + abandonOwedWhere(lanes) + `)
			ORDER BY owed DESC, run_at, id
			LIMIT ?)
		RETURNING ` + cols
}

// reclaimStuckOrders: as claimJobs, the single writer is the lock; the
// repeated guard keeps the statement right under any engine. The orders
// are found among the processing ones only, through
// orders_status_created: the profile is compared as an expression no
// index serves, which keeps SQLite's planner, having no statistics, from
// reading every order of the profile through orders_profile_created.
func (sqliteDialect) reclaimStuckOrders(cols, pick string) string {
	return `UPDATE orders SET updated_at = ?, claimed_by = ?
		WHERE id IN (SELECT id FROM orders WHERE profile || '' = ? AND status = 'processing' AND ` + pick + `
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE kind = ? AND key = orders.id AND status IN ('ready','running'))
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE kind = ? AND key = orders.id AND abandon_owed = 1) LIMIT ?)
		AND status = 'processing' AND ` + pick + `
		RETURNING ` + cols
}

// lockForMigration needs no lock: migrate's transaction is a write, and
// SQLite's _txlock=immediate takes the database's write lock at BEGIN.
func (sqliteDialect) lockForMigration(context.Context, *sql.Tx) error { return nil }

// serverClock: none, SQLite's clock being this process's own.
func (sqliteDialect) serverClock() string { return "" }

// announceJob: SQLite has no signal between processes; their runners
// find each other's jobs by polling.
func (sqliteDialect) announceJob() string { return "" }

// rowLock: none, the group commit being the only writer; the statements
// that only lock rows are not sent.
func (sqliteDialect) rowLock() string { return "" }

func (sqliteDialect) shareLock() string { return "" }

// spendNonceAs: none (SQLite has no INSERT in a WITH); the group commit
// runs the transaction of two statements in the writer's process anyway.
func (sqliteDialect) spendNonceAs() string { return "" }

// issueOrder: none, as spendNonceAs.
func (sqliteDialect) issueOrder(int) string { return "" }

// insertsInWith: no, as spendNonceAs; in the writer's own process a
// statement per row costs no round trip.
func (sqliteDialect) insertsInWith() bool { return false }

func (sqliteDialect) crlLateRows() (mark, late string) { return "", "" }

// crlStaleRows: SQLite commits ledger rows in the order of their ids, so
// a CRL lists every row of its CA up to its ledger_seq and none above,
// and the rows above are found by revocations_ledger, the CA's rows in id
// order: none, or the first that no CRL lists yet.
func (sqliteDialect) crlStaleRows() string {
	return `EXISTS (SELECT 1 FROM revocations r WHERE r.issuer_key_id = cas.k AND r.id > c.ledger_seq)`
}

func (e *sqliteEngine) watchJobs(context.Context, func(string)) {}
