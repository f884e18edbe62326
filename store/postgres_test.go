package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

func openPostgres(t *testing.T, dsn string) *DB {
	t.Helper()
	db, err := OpenPostgres(context.Background(), dsn, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// publicSchema lists a database's tables and recorded migrations: what a
// refused open must leave as it found it.
func publicSchema(t *testing.T, dsn string) string {
	t.Helper()
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var tables, versions sql.NullString
	if err := raw.QueryRow(`SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow(`SELECT string_agg(version || ':' || name, ',' ORDER BY version) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	return tables.String + " | " + versions.String
}

func TestPostgresStoresStartingTogetherMigrateOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	const openers = 6
	var wg sync.WaitGroup
	errs := make([]error, openers)
	for i := range openers {
		wg.Go(func() {
			db, err := OpenPostgres(context.Background(), dsn, PostgresOptions{})
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	db := openPostgres(t, dsn)
	var n, distinct int
	if err := db.r.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(postgresMigrations) || distinct != n {
		t.Fatalf("%d migrations recorded (%d distinct), want each of %d once", n, distinct, len(postgresMigrations))
	}
}

func TestAPostgresDatabaseNewerThanTheBinaryIsRefusedUntouched(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db, err := OpenPostgres(ctx, dsn, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A newer binary ran one more migration.
	if _, err := rawW(db).ExecContext(ctx, `CREATE TABLE from_the_future (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	if _, err := rawW(db).ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`,
		len(postgresMigrations)+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := publicSchema(t, dsn)

	_, err = OpenPostgres(ctx, dsn, PostgresOptions{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open: got %v, want ErrSchemaTooNew", err)
	}
	if want := fmt.Sprintf("schema version %d, this binary knows up to %d", len(postgresMigrations)+1, len(postgresMigrations)); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if after := publicSchema(t, dsn); after != before {
		t.Fatalf("the refused database changed:\nbefore %s\nafter  %s", before, after)
	}
}

// The DSN may carry a password: neither the store's name nor its errors
// repeat it, and the name says host and database only.
func TestAPostgresDSNNeverAppearsInTheStoresNameOrErrors(t *testing.T) {
	const secret = "hunter2-s3cret"
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dsn  string
	}{
		{"a DSN that does not parse", "postgres://acmeuser:" + secret + "@db.example:notaport/acme"},
		{"a server that is not there", "postgres://acmeuser:" + secret + "@127.0.0.1:1/acme?sslmode=disable&connect_timeout=5"},
		{"a key=value DSN", "host=127.0.0.1 port=1 user=acmeuser password=" + secret + " dbname=acme sslmode=disable connect_timeout=5"},
		{"a URL whose password holds a slash after digits", "postgres://acmeuser:1234/" + secret + "@127.0.0.1:1/acme?sslmode=disable&connect_timeout=5"},
		{"a URL whose password starts with a slash", "postgresql://acmeuser:/" + secret + "@127.0.0.1:1/acme?connect_timeout=5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenPostgres(ctx, tc.dsn, PostgresOptions{})
			if err == nil {
				t.Fatal("open succeeded")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "acmeuser") {
				t.Fatalf("error %q repeats the DSN's credentials", err)
			}
		})
	}

	db := openPostgres(t, pgtest.DSN(t))
	name := db.String()
	if !strings.HasPrefix(name, "postgres unix:/") || !strings.Contains(name, "/t") || strings.Contains(name, "user") {
		t.Fatalf("store name %q; want postgres, the host and the database", name)
	}
}

// A password with a '/' ends a URL's user and password early (libpq's
// rule, which pgx follows); only such a URL is refused, not an '@' that
// belongs where it is.
func TestAPostgresURLIsRefusedOnlyWhenItsPasswordCutItShort(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  string
		cut  bool
	}{
		{"a password with a slash after digits", "postgres://acme:1234/abc@db/acme", true},
		{"a password that starts with a slash", "postgresql://acme:/abc@db:5433/acme?sslmode=verify-full", true},
		{"a user and password", "postgres://acme:s3cret@db/acme?sslmode=verify-full", false},
		{"a percent-encoded slash", "postgres://acme:1234%2Fabc@db/acme", false},
		{"a user with an at in the query", "postgres://db/acme?user=acme@server", false},
		{"a password with an at", "postgres://acme:p@ss@db/acme", false},
		{"no user at all", "postgres://db/acme", false},
		{"a key=value DSN", "host=db user=acme password=1234/abc@x dbname=acme", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := passwordCutURL(tc.dsn); got != tc.cut {
				t.Fatalf("passwordCutURL(%q) = %v, want %v", tc.dsn, got, tc.cut)
			}
		})
	}
}

func TestPostgresDurableWritesCommitSynchronouslyAndLazyOnesNeedNot(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db := openPostgres(t, dsn)
	// Even where the server's default is off, a durable write is on.
	var dbName string
	if err := db.r.QueryRow(`SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	if _, err := db.r.Exec(`ALTER DATABASE ` + dbName + ` SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = openPostgres(t, dsn)

	for _, tc := range []struct {
		name string
		lazy bool
		want string
	}{
		{"durable", false, "on"},
		{"lazy", true, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			if err := db.eng.do(ctx, func(tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&got)
			}, tc.lazy); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("a %s write commits with synchronous_commit = %s, want %s", tc.name, got, tc.want)
			}
		})
	}
}

func TestAReadOnlyPostgresAnswersWritesWithErrUnavailableWhileReadsGoOn(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db := openPostgres(t, dsn)
	if err := db.InsertAudit(ctx, AuditEvent{At: t0, Event: "before", Outcome: "success"}); err != nil {
		t.Fatal(err)
	}
	var dbName string
	if err := db.r.QueryRow(`SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	if _, err := db.r.Exec(`ALTER DATABASE ` + dbName + ` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// It opens: nothing is left to migrate, and finding that out only
	// reads.
	db = openPostgres(t, dsn)
	if err := db.InsertAudit(ctx, AuditEvent{At: t0, Event: "after", Outcome: "success"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a write to a read-only database: %v; want ErrUnavailable", err)
	}
	if _, err := db.UseNonce(ctx, "n1", t0); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a lazy write to a read-only database: %v; want ErrUnavailable", err)
	}
	if got, err := db.SearchAudit(ctx, AuditFilter{Event: "before", Limit: 1}); err != nil || len(got) != 1 {
		t.Errorf("a read from a read-only database: %d rows, %v; want the row written before", len(got), err)
	}
}

func TestPostgresPlaceholdersAreNumberedOutsideQuotesOnly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`UPDATE t SET a = ?, b = ? WHERE c = ?`, `UPDATE t SET a = $1, b = $2 WHERE c = $3`},
		{`SELECT '?' , ? FROM "we?ird" WHERE x = 'it''s ?' AND y = ?`, `SELECT '?' , $1 FROM "we?ird" WHERE x = 'it''s ?' AND y = $2`},
	} {
		// The second answer is the remembered one.
		for range 2 {
			if got := (postgresDialect{}).rebind(tc.in); got != tc.want {
				t.Errorf("rebind(%q) = %q, want %q", tc.in, got, tc.want)
			}
		}
	}
}

func TestPostgresPlaceholdersOfMoreStatementsThanAreRememberedAreStillNumbered(t *testing.T) {
	long := "SELECT ?" + strings.Repeat(" ", rebindCacheLen) + ", ?"
	if got, want := (postgresDialect{}).rebind(long), "SELECT $1"+strings.Repeat(" ", rebindCacheLen)+", $2"; got != want {
		t.Errorf("a statement too long to remember: got %.20q…, want %.20q…", got, want)
	}
	for i := range rebindCacheMax + 10 {
		stmt := fmt.Sprintf("SELECT %d, ?, ?", i)
		if got, want := (postgresDialect{}).rebind(stmt), fmt.Sprintf("SELECT %d, $1, $2", i); got != want {
			t.Fatalf("rebind(%q) = %q, want %q", stmt, got, want)
		}
	}
	n := 0
	rebound.Range(func(k, _ any) bool {
		if len(k.(string)) > rebindCacheLen {
			t.Errorf("a statement of %d bytes was remembered", len(k.(string)))
		}
		n++
		return true
	})
	if n > rebindCacheMax {
		t.Errorf("%d statements remembered, want at most %d", n, rebindCacheMax)
	}
}

func BenchmarkPostgresPlaceholders(b *testing.B) {
	stmt := `UPDATE orders SET status = 'ready', updated_at = ? WHERE id = ? AND profile = ? AND status = 'pending'
		AND NOT EXISTS (SELECT 1 FROM authorizations WHERE order_id = ? AND status <> 'valid') RETURNING ` + orderCols
	for _, bc := range []struct {
		name   string
		rebind func(string) string
	}{
		{"numbered each time", numberPlaceholders},
		{"remembered", postgresDialect{}.rebind},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.rebind(stmt)
			}
		})
	}
}

// A claim skips a job whose row another transaction holds locked (an
// instance's claim not yet committed) and takes the next due one at
// once, instead of waiting behind that instance: FOR UPDATE SKIP LOCKED.
// The ORDER BY puts the locked job first, so a claim that waits for it
// runs out of time instead.
func TestAPostgresClaimSkipsAJobAnotherTransactionHoldsAndTakesTheNext(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db := openPostgres(t, dsn)
	held, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3}, t0)
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3, RunAt: t0.Add(time.Second)}, t0)
	if err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE id = $1 FOR UPDATE`, held.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := db.ClaimJobs(cctx, "k", "me", t0.Add(time.Second), t0.Add(time.Minute), 2)
	if err != nil {
		t.Fatalf("claim while another transaction holds job %d: %v; want job %d at once", held.ID, err, next.ID)
	}
	if len(got) != 1 || got[0].ID != next.ID {
		t.Fatalf("claimed %+v; want only job %d, not the held job %d", got, next.ID, held.ID)
	}
}

// What a store says once the server is gone after it opened — the errors
// of its calls while PostgreSQL is down, which the runner and the ACME
// front log — does not name the DSN's user, as pgx's connection errors
// do: the store names a database by host and database only. And it is
// still unavailable, for a 503. (Not parallel: it stops the binary's
// cluster.)
func TestAPostgresStoreWhoseServerWentAwayFailsNamingNoUser(t *testing.T) {
	ctx := context.Background()
	db := openPostgres(t, pgtest.DSN(t))
	pgtest.Stop(t)
	defer pgtest.Start(t)
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"a read", func() error { _, err := db.CountJobs(ctx); return err }},
		// The write pool's connections are idle and seem alive: the
		// first statement on one finds it closed, having sent nothing.
		{"a write", func() error {
			_, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1}, t0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil || !IsUnavailable(err) {
				t.Fatalf("%s while the server is down: %v; want an unavailable error", tc.name, err)
			}
			if strings.Contains(err.Error(), "user=") {
				t.Errorf("error %q names the DSN's user", err)
			}
		})
	}
}

// Once PostgreSQL is back after a restart, the store's first write
// succeeds: the pooled connections the restart closed are found closed
// as a statement is sent, and the write is run again on a new one,
// rather than failing a request for each of them. (Not parallel: it
// restarts the binary's cluster.)
func TestAPostgresStoresFirstWriteAfterARestartSucceeds(t *testing.T) {
	ctx := context.Background()
	db := openPostgres(t, pgtest.DSN(t))
	if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "before", MaxAttempts: 1}, t0); err != nil {
		t.Fatal(err)
	}
	pgtest.Stop(t)
	pgtest.Start(t)
	if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "after", MaxAttempts: 1}, t0); err != nil {
		t.Fatalf("the first write after the restart: %v", err)
	}
}
