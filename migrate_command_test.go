package caddyacmeproxy

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// runCLI runs `caddy acme-proxy args…` and returns what it printed.
func runCLI(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := &cobra.Command{Use: "acme-proxy"}
	configureCLI(cmd, &out)
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	return out.String(), err
}

func TestMigrateStoreMovesASQLiteStoreIntoPostgreSQLOnceAndNamesNoPassword(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "acme_proxy.db")
	src, err := store.OpenSQLite(ctx, path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	acct, _, err := src.CreateAccount(ctx, store.Account{Profile: "internal", Thumbprint: "th", KeyJWK: []byte(`{}`)}, now)
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	t.Setenv("ACMEPROXY_TEST_PGPASSWORD", "s3cret-pw")
	dsn := pgtest.DSN(t) + " password={env.ACMEPROXY_TEST_PGPASSWORD}"

	out, err := runCLI("migrate-store", "--from", path, "--to", dsn)
	if err != nil {
		t.Fatalf("migrate-store: %v\n%s", err, out)
	}
	if !strings.Contains(out, "every count matches") || !strings.Contains(out, "accounts") {
		t.Errorf("output does not report the copy:\n%s", out)
	}
	if strings.Contains(out, "s3cret-pw") {
		t.Errorf("the output shows the password:\n%s", out)
	}
	dst, err := store.OpenPostgres(ctx, strings.ReplaceAll(dsn, "{env.ACMEPROXY_TEST_PGPASSWORD}", "s3cret-pw"), store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if got, err := dst.GetAccount(ctx, "internal", acct.ID); err != nil || got.Thumbprint != "th" {
		t.Errorf("the account in PostgreSQL: %+v %v", got, err)
	}

	out, err = runCLI("migrate-store", "--from", path, "--to", dsn)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a second run: %v\n%s; want a refusal naming a non-empty target", err, out)
	}
}

func TestMigrateStoreRefusesAMissingSourceOrTarget(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.db")
	for name, args := range map[string][]string{
		"no --to":        {"migrate-store", "--from", missing},
		"no --from":      {"migrate-store", "--to", "host=/nonexistent dbname=x"},
		"a missing file": {"migrate-store", "--from", missing, "--to", "host=/nonexistent dbname=x"},
	} {
		if _, err := runCLI(args...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing --from file was created: %v", err)
	}
}

// A target that holds rows (a live database named by mistake) is refused
// before anything is written: neither its schema nor the source file is
// touched.
func TestMigrateStoreLeavesATargetThatHoldsRowsAndItsSourceUntouched(t *testing.T) {
	ctx := context.Background()
	path := emptySQLiteStore(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dsn := pgtest.DSN(t)
	live, err := store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := live.CreateAccount(ctx, store.Account{Profile: "internal", Thumbprint: "th", KeyJWK: []byte(`{}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	live.Close()
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// As an older binary's database: the newest migration not applied.
	var newest int
	if err := raw.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = $1`, newest); err != nil {
		t.Fatal(err)
	}

	if out, err := runCLI("migrate-store", "--from", path, "--to", dsn); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("migrate-store onto a database holding rows: %v\n%s; want a refusal naming a non-empty target", err, out)
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the source file changed (%v)", err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Errorf("the source was opened: it has a WAL file")
	}
	var applied bool
	if err := raw.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, newest).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied {
		t.Errorf("migration %d was applied to the refused target", newest)
	}
}

// A target only migrated (by a copy that failed half-way, say) holds no
// row: the copy goes ahead.
func TestMigrateStoreCopiesIntoATargetThatIsMigratedButEmpty(t *testing.T) {
	ctx := context.Background()
	path := emptySQLiteStore(t)
	dsn := pgtest.DSN(t)
	migrated, err := store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	if out, err := runCLI("migrate-store", "--from", path, "--to", dsn); err != nil {
		t.Fatalf("migrate-store into a migrated, empty database: %v\n%s", err, out)
	}
}

// emptySQLiteStore is the path of a SQLite store, migrated and closed,
// with no rows.
func emptySQLiteStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acme_proxy.db")
	src, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	return path
}
