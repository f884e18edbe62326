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
)

// DB is an open store. It is safe for concurrent use.
//
// Reads go through r, a pool of connections; every write goes through the
// dialect's engine (see engine), reached by withTx, withLazyTx and the
// writers wr and lazyWr.
type DB struct {
	r       *sql.DB
	eng     engine
	wr      writer // single-statement writes
	lazyWr  writer // single-statement lazy writes (see engine)
	dialect dialect
	desc    string // where the store lives, for messages; never a credential
}

// open finishes opening a store on a dialect's read pool and write engine:
// it brings the schema up to date, and on failure releases both.
func open(ctx context.Context, r *sql.DB, eng engine, d dialect, desc string) (*DB, error) {
	db := &DB{r: r, eng: eng, dialect: d, desc: desc}
	db.wr = writer{db: db}
	db.lazyWr = writer{db: db, lazy: true}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
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
