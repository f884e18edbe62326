// Package store is the project's database: it owns the schema (as ordered,
// append-only migrations) and every SQL statement, so the rest of the code
// talks in domain methods and never in SQL. SQLite (through modernc.org/sqlite,
// no cgo) is the embedded default; the dialect seam keeps PostgreSQL a matter
// of adding statements here, not of touching callers.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DB is an open store. It is safe for concurrent use.
//
// Writes go through w, reads through r. For SQLite, w has exactly one
// connection: writers serialize on the database lock anyway, and one
// connection turns lock contention inside this process into a queue in
// database/sql instead of SQLITE_BUSY retries.
type DB struct {
	w, r    *sql.DB
	gc      *groupCommit
	wr      writer // single-statement writes, through gc
	lazyWr  writer // single-statement lazy writes (see groupCommit)
	dialect dialect
	desc    string // where the store lives, for messages; never a credential
}

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
}

// OpenSQLite opens (creating if needed) the SQLite database at path, brings
// its schema up to date, and returns the store. A database whose schema is
// newer than this binary is refused (ErrSchemaTooNew) and left untouched.
func OpenSQLite(ctx context.Context, path string, opts SQLiteOptions) (*DB, error) {
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
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: creating directory for %s: %w", path, err)
		}
	}

	// The schema check happens on a read-only handle first, so a database
	// from a newer binary is not even switched to WAL by us.
	if err := refuseNewerSchema(ctx, path, opts, sqliteDialect{}); err != nil {
		return nil, err
	}

	wc, err := newCachingConnector(sqliteDSN(path, opts, false))
	if err != nil {
		return nil, err
	}
	w := sql.OpenDB(wc)
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	rc, err := newCachingConnector(sqliteDSN(path, opts, true))
	if err != nil {
		w.Close()
		return nil, err
	}
	r := sql.OpenDB(rc)
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	r.SetConnMaxIdleTime(0)

	db := &DB{w: w, r: r, dialect: sqliteDialect{}, desc: path}
	db.gc = newGroupCommit(w, opts.Synchronous)
	db.wr = writer{db: db}
	db.lazyWr = writer{db: db, lazy: true}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
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

// Close finishes the writes already handed over and releases both
// connection pools.
func (db *DB) Close() error {
	db.gc.stop()
	return errors.Join(db.w.Close(), db.r.Close())
}

// String names where the store lives, without credentials.
func (db *DB) String() string { return db.desc }

// withTx runs fn in a write transaction, committing if it returns nil. It
// is the only way the store writes: see groupCommit.
func (db *DB) withTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return db.unavailable(db.gc.do(ctx, fn, false))
}

// Flush makes every write committed so far durable, lazy ones included:
// it is a durable write of its own (see groupCommit), for a caller that
// wrote lazily and is about to rely on it surviving a power loss.
func (db *DB) Flush(ctx context.Context) error {
	_, err := db.wr.ExecContext(ctx, db.q(`INSERT INTO flushes (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1`))
	if err != nil {
		return fmt.Errorf("store: flush: %w", err)
	}
	return nil
}

// withLazyTx is withTx for a write that may skip its own fsync: durable
// across a crash of the process at once, across a crash of the machine
// from the next durable commit on (see groupCommit).
func (db *DB) withLazyTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return db.unavailable(db.gc.do(ctx, fn, true))
}

// q rewrites a statement written with ? placeholders for the dialect.
func (db *DB) q(stmt string) string { return db.dialect.rebind(stmt) }
