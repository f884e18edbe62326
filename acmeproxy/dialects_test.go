package acmeproxy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/dialecttest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testDialect is one row of testDialects: how to make a fresh place for a
// store (a SQLite file, a PostgreSQL database) and open a store there.
// Environments opened at one place share it, as instances do.
type testDialect struct {
	name   string
	place  func(t testing.TB) string
	openAt func(ctx context.Context, place string, sqlite store.SQLiteOptions) (*store.DB, error)
}

// testDialects is the table the protocol tests run over.
var testDialects = []testDialect{
	{"sqlite",
		func(t testing.TB) string { return filepath.Join(t.TempDir(), "acme.db") },
		func(ctx context.Context, path string, o store.SQLiteOptions) (*store.DB, error) {
			return store.OpenSQLite(ctx, path, o)
		}},
	{"postgres",
		pgtest.DSN,
		func(ctx context.Context, dsn string, _ store.SQLiteOptions) (*store.DB, error) {
			return store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
		}},
}

// eachDialect runs body once per dialect, as subtests named after it;
// the test environments built inside body use that dialect's store.
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

// newPlace makes a fresh, empty place of the running test's dialect, for
// envOptions.dbPath.
func newPlace(t testing.TB) string {
	t.Helper()
	return dialectOf(t).place(t)
}
