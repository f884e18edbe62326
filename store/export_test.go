package store

import (
	"context"
	"database/sql"
)

// rawW is a store's write pool, for tests that write around the store's
// methods (an old schema's rows, a forbidden change). Its statements are
// written with ? placeholders, as the store's are.
func rawW(db *DB) rawDB {
	switch e := db.eng.(type) {
	case *sqliteEngine:
		return rawDB{db, e.w}
	case *postgresEngine:
		return rawDB{db, e.w}
	}
	panic("rawW: unknown engine")
}

type rawDB struct {
	db *DB
	w  *sql.DB
}

func (r rawDB) Exec(stmt string, args ...any) (sql.Result, error) {
	return r.w.Exec(r.db.q(stmt), args...)
}

func (r rawDB) ExecContext(ctx context.Context, stmt string, args ...any) (sql.Result, error) {
	return r.w.ExecContext(ctx, r.db.q(stmt), args...)
}

func (r rawDB) QueryRowContext(ctx context.Context, stmt string, args ...any) *sql.Row {
	return r.w.QueryRowContext(ctx, r.db.q(stmt), args...)
}

// insertionOrder is an expression ordering a table's rows as they were
// inserted, for tests that check a column recording that order.
func insertionOrder(db *DB) string {
	if db.dialect.name() == "postgres" {
		return "ctid" // a fresh table only appended to
	}
	return "rowid"
}

// For the tests of package store_test, which drive the store through the
// packages above it: the dialect table, a fresh store of the running
// dialect, and the row counts of the tables retention keeps bounded.
var (
	EachDialect = eachDialect
	OpenTest    = openTest
	RowCounts   = rowCounts
)
