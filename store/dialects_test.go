package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/dialecttest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testDialect is one row of testDialects. A place is where a store
// lives: a SQLite file, a PostgreSQL database; stores opened at one place
// share it, as processes do.
type testDialect struct {
	name   string
	place  func(t testing.TB) string
	openAt func(ctx context.Context, place string) (*DB, error)
}

// open opens a store at a fresh, empty place.
func (d testDialect) open(t testing.TB) *DB {
	t.Helper()
	db, err := d.openAt(context.Background(), d.place(t))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// testDialects is the table every store test that runs on any database
// runs over.
var testDialects = []testDialect{
	{"sqlite",
		func(t testing.TB) string { return filepath.Join(t.TempDir(), "t.db") },
		func(ctx context.Context, path string) (*DB, error) { return OpenSQLite(ctx, path, SQLiteOptions{}) }},
	{"postgres",
		pgtest.DSN,
		func(ctx context.Context, dsn string) (*DB, error) { return OpenPostgres(ctx, dsn, PostgresOptions{}) }},
}

// eachDialect runs body once per dialect, as subtests named after it;
// openTest inside body opens a store of that dialect.
func eachDialect(t *testing.T, body func(t *testing.T)) {
	for _, d := range testDialects {
		t.Run(d.name, body)
	}
}

// dialectOf is the dialect the running test is under (see eachDialect);
// a test outside eachDialect gets SQLite.
func dialectOf(t testing.TB) testDialect {
	names := make([]string, len(testDialects))
	for i, d := range testDialects {
		names[i] = d.name
	}
	return testDialects[dialecttest.Of(t.Name(), names)]
}

// openTest opens a fresh store of the running test's dialect.
func openTest(t testing.TB) *DB {
	t.Helper()
	db := dialectOf(t).open(t)
	t.Cleanup(func() { db.Close() })
	return db
}

// newPlace makes a fresh, empty place of the running test's dialect, for
// openAt.
func newPlace(t testing.TB) string {
	t.Helper()
	return dialectOf(t).place(t)
}

// openAt opens a store of the running test's dialect at place.
func openAt(t testing.TB, place string) *DB {
	t.Helper()
	db, err := dialectOf(t).openAt(context.Background(), place)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
