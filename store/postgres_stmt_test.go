package store

import (
	"context"
	"database/sql"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// Every write on PostgreSQL, a transaction of several statements or one
// statement sent on its own (without BEGIN, one round trip), runs READ
// COMMITTED, whatever the server's default, and commits durably unless it
// is lazy: the level the store's guarded writes and row locks are written
// for (see postgresEngine) holds on the short path too.
func TestEveryPostgresWriteIsReadCommittedAndOnlyLazyOnesCommitLazily(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	// A server whose default is stricter: the write pools set their own.
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = serializable', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db := openPostgres(t, dsn)
	const settings = `SELECT current_setting('transaction_isolation'), current_setting('synchronous_commit')`
	for _, tc := range []struct {
		name       string
		read       func(dest ...any) error
		wantCommit string
	}{
		{"a durable transaction", func(dest ...any) error {
			return db.withTx(ctx, func(tx *sql.Tx) error { return tx.QueryRowContext(ctx, settings).Scan(dest...) })
		}, "on"},
		{"a lazy transaction", func(dest ...any) error {
			return db.withLazyTx(ctx, func(tx *sql.Tx) error { return tx.QueryRowContext(ctx, settings).Scan(dest...) })
		}, "off"},
		{"a durable statement", func(dest ...any) error { return db.wr.QueryRowContext(ctx, settings).Scan(dest...) }, "on"},
		{"a lazy statement", func(dest ...any) error { return db.lazyWr.QueryRowContext(ctx, settings).Scan(dest...) }, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var isolation, commit string
			if err := tc.read(&isolation, &commit); err != nil {
				t.Fatal(err)
			}
			if isolation != "read committed" || commit != tc.wantCommit {
				t.Errorf("%s runs %s with synchronous_commit = %s, want read committed with %s", tc.name, isolation, commit, tc.wantCommit)
			}
		})
	}
	// Reads stay on their own pool, at the server's default.
	var isolation string
	if err := db.r.QueryRowContext(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&isolation); err != nil {
		t.Fatal(err)
	}
	if isolation != "serializable" {
		t.Errorf("a read runs %s, want the database's default, serializable", isolation)
	}
}
