// Package store is the project's database: it owns the schema (as ordered,
// append-only migrations) and every SQL statement, so the rest of the code
// talks in domain methods and never in SQL. SQLite (through modernc.org/sqlite,
// no cgo) is the embedded default; the dialect seam (dialect.go) keeps
// another database, PostgreSQL, a matter of adding a dialect — its
// migrations, the few statements that differ, and a write engine — not of
// touching the store's statements or its callers.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// DB is a store. It is safe for concurrent use.
//
// Reads go through r, a pool of connections; every write goes through the
// dialect's engine (see engine), reached by withTx, withLazyTx and the
// writers wr and lazyWr.
//
// A store is built closed (PrepareSQLite, PreparePostgres): until Open it
// makes no connection and touches no file, so that a configuration can be
// checked (caddy validate) without creating the database or upgrading a
// schema other processes run on. Check looks at the database read-only;
// Open creates or connects to it and brings its schema up to date. Before
// Open every statement fails with ErrNotOpen (and ErrUnavailable).
type DB struct {
	r       *sql.DB
	eng     engine
	wr      writer // single-statement writes
	lazyWr  writer // single-statement lazy writes (see engine)
	dialect dialect
	desc    string // where the store lives, for messages; never a credential

	// prepare is what the dialect does before the schema is brought up
	// to date (create the file, connect); check is Check's read-only look.
	prepare, check func(ctx context.Context) error
	// connectable lets the pools' connectors connect (see gatedConnect):
	// set by Open once prepare has run.
	connectable *atomic.Bool
	openMu      sync.Mutex
	opened      atomic.Bool

	// revocationRow, set by tests only, is called inside a revocation's
	// write (RevokeCertificate) once its ledger row has its id, before
	// the write commits: a test holds the write open there.
	revocationRow func(certificateID string)

	// refusedStops: see recordStopped.
	refusedStops refusedStops
}

// newDB builds a closed store on a dialect's read pool and write engine,
// whose connectors ask connectable before they connect.
func newDB(r *sql.DB, eng engine, d dialect, desc string, connectable *atomic.Bool, prepare, check func(context.Context) error) *DB {
	db := &DB{r: r, eng: eng, dialect: d, desc: desc, connectable: connectable, prepare: prepare, check: check}
	db.wr = writer{db: db}
	db.lazyWr = writer{db: db, lazy: true}
	return db
}

// open opens a store just built, and on failure releases it.
func open(ctx context.Context, db *DB) (*DB, error) {
	if err := db.Open(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Check looks at the database without writing to it: that it can be read
// (a PostgreSQL server answers, a SQLite file is a database) and that its
// schema is not newer than this binary knows (ErrSchemaTooNew). A SQLite
// file that does not exist yet passes if Open may create it (and the
// directories missing above it). An open store passes.
func (db *DB) Check(ctx context.Context) error {
	if db.opened.Load() {
		return nil
	}
	return db.check(ctx)
}

// Open creates or connects to the database and brings its schema up to
// date; a database newer than this binary is refused (ErrSchemaTooNew)
// and left untouched. Opening an open store does nothing; one whose Open
// failed may be opened again.
func (db *DB) Open(ctx context.Context) error {
	db.openMu.Lock()
	defer db.openMu.Unlock()
	if db.opened.Load() {
		return nil
	}
	if err := db.prepare(ctx); err != nil {
		return err
	}
	db.connectable.Store(true)
	if err := db.migrate(ctx); err != nil {
		db.connectable.Store(false)
		return err
	}
	db.opened.Store(true)
	return nil
}

// IsOpen reports whether Open has succeeded.
func (db *DB) IsOpen() bool { return db.opened.Load() }

// gatedConnect is what a pool's connector does before it connects: refuse
// until the store is open.
func gatedConnect(connectable *atomic.Bool, desc string) error {
	if !connectable.Load() {
		return fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrNotOpen, desc)
	}
	return nil
}

// Close finishes the writes already handed over and releases both
// connection pools.
func (db *DB) Close() error {
	return errors.Join(db.eng.close(), db.r.Close())
}

// String names where the store lives, without credentials.
func (db *DB) String() string { return db.desc }

// withTx runs fn in a write transaction, committing if it returns nil. It
// is the only way the store writes: see engine.
func (db *DB) withTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return db.unavailable(db.eng.do(ctx, fn, false))
}

// Flush makes every write committed so far durable, lazy ones included:
// it is a durable write of its own (see engine), for a caller that
// wrote lazily and is about to rely on it surviving a power loss.
//
// One upsert of a fixed row.
func (db *DB) Flush(ctx context.Context) error {
	_, err := db.wr.ExecContext(ctx, db.q(`INSERT INTO flushes (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = flushes.n + 1`))
	if err != nil {
		return fmt.Errorf("store: flush: %w", err)
	}
	return nil
}

// withLazyTx is withTx for a write that may skip its own fsync: durable
// across a crash of the process at once, across a crash of the machine
// from the next durable commit on (see engine).
func (db *DB) withLazyTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return db.unavailable(db.eng.do(ctx, fn, true))
}

// q rewrites a statement written with ? placeholders for the dialect.
func (db *DB) q(stmt string) string { return db.dialect.rebind(stmt) }

// marks is n placeholders, "?, ?, …", for a list of n values (IN, VALUES).
func marks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
