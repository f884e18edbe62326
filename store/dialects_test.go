package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testDialects is the table every store test that runs on any database
// runs over: each opens a fresh, empty store.
var testDialects = []struct {
	name string
	open func(t testing.TB) *DB
}{
	{"sqlite", func(t testing.TB) *DB {
		t.Helper()
		db, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "t.db"), SQLiteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}},
	{"postgres", func(t testing.TB) *DB {
		t.Helper()
		db, err := OpenPostgres(context.Background(), pgtest.DSN(t), PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}},
}

// eachDialect runs body once per dialect, as subtests named after it;
// openTest inside body opens a store of that dialect.
func eachDialect(t *testing.T, body func(t *testing.T)) {
	for _, d := range testDialects {
		t.Run(d.name, body)
	}
}

// openTest opens a fresh store of the dialect the running test is under
// (see eachDialect); a test outside eachDialect gets SQLite.
func openTest(t testing.TB) *DB {
	t.Helper()
	d := testDialects[0]
	if parts := strings.Split(t.Name(), "/"); len(parts) > 1 {
		for _, c := range testDialects {
			if parts[1] == c.name {
				d = c
			}
		}
	}
	db := d.open(t)
	t.Cleanup(func() { db.Close() })
	return db
}
