package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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

// OpenSQLiteObserved opens a fresh SQLite store whose connections tell
// observe every statement they run (at least once each).
func OpenSQLiteObserved(t testing.TB, observe func(query string)) *DB {
	t.Helper()
	db, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "t.db"), SQLiteOptions{observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// IsMigrationStatement reports whether stmt is one of SQLite's migration
// steps, which run once, at open.
func IsMigrationStatement(stmt string) bool {
	for _, m := range sqliteMigrations {
		if slices.Contains(m.stmts, stmt) {
			return true
		}
	}
	return strings.Contains(stmt, "schema_migrations")
}

// QueryPlan is SQLite's EXPLAIN QUERY PLAN of stmt, one detail per step,
// with every parameter NULL; ok is false for what is not a query (BEGIN,
// SAVEPOINT, a pragma).
func QueryPlan(ctx context.Context, db *DB, stmt string) (plan []string, ok bool, err error) {
	switch f := strings.Fields(stmt); {
	case len(f) == 0:
		return nil, false, nil
	case !slices.Contains([]string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}, strings.ToUpper(f[0])):
		return nil, false, nil
	}
	args := make([]any, strings.Count(stmt, "?"))
	rows, err := rawW(db).w.QueryContext(ctx, "EXPLAIN QUERY PLAN "+stmt, args...)
	if err != nil {
		return nil, true, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			return nil, true, err
		}
		plan = append(plan, detail)
	}
	return plan, true, rows.Err()
}
