package caddyacmeproxy

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
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

// A --to whose placeholder is empty (its variable unset) is refused
// before any connection: an empty DSN, or one missing a part, is libpq's
// defaults (PGHOST, PGDATABASE, a local socket), most likely another
// database than the one meant, which the copy would fill if it is empty.
func TestMigrateStoreRefusesATargetWhosePlaceholderIsEmpty(t *testing.T) {
	// libpq's defaults name an empty database of the test cluster.
	for _, kv := range strings.Fields(pgtest.DSN(t)) {
		k, v, _ := strings.Cut(kv, "=")
		if env := map[string]string{"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}[k]; env != "" {
			t.Setenv(env, v)
		}
	}
	path := emptySQLiteStore(t)
	out, err := runCLI("migrate-store", "--from", path, "--to", "{env.ACMEPROXY_TEST_UNSET_PG_DSN}")
	if err == nil {
		t.Fatalf("migrated into libpq's default database:\n%s", out)
	}
	if want := "migrate-store: --to: evaluated placeholder {env.ACMEPROXY_TEST_UNSET_PG_DSN} is empty"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q\ndoes not contain %q", err, want)
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

// sourceUse is a SQLite store left as an instance leaves it, for
// migrate-store's source.
type sourceUse struct {
	name  string
	leave func(t *testing.T, path string)
}

// sourceWithAnAccount is a stopped instance's SQLite store holding one
// account.
func sourceWithAnAccount(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acme_proxy.db")
	db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := db.CreateAccount(context.Background(), store.Account{Profile: "internal", Thumbprint: "th", KeyJWK: []byte(`{}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return path
}

// runPeriodic starts a runner on db whose one periodic job runs until its
// context ends, and returns once the job runs (holding its lease).
func runPeriodic(t *testing.T, db *store.DB) *jobs.Runner {
	t.Helper()
	running := make(chan struct{})
	h := &jobs.Periodic{Name: "migrate_test_sweep", Every: time.Hour, Do: func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		return ctx.Err()
	}}
	r, err := jobs.NewRunner(jobs.NewQueue(db, nil), []jobs.Handler{h}, jobs.RunnerOptions{Owner: "caddy-host:4242:abc", StopTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the periodic job did not start")
	}
	return r
}

// leaseJob leaves a job of kind leased to owner from claimed for a minute,
// as a runner that claimed it then and died leaves it.
func leaseJob(t *testing.T, path, kind, owner string, claimed time.Time) {
	t.Helper()
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := db.EnqueueJob(ctx, store.NewJob{Kind: kind, MaxAttempts: 3, RunAt: claimed}, claimed); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ClaimJobs(ctx, kind, owner, claimed, claimed.Add(time.Minute), 1); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
}

// migrate-store refuses a source a running Caddy may still write to —
// whatever it wrote after the copy began would be lost without a word —
// copying nothing, and says what it saw: the process that has the file
// open, a job lease not lapsed (and when a crashed instance's lapses).
func TestMigrateStoreRefusesASourceARunningInstanceMayWriteToAndSaysWhatItSaw(t *testing.T) {
	leaseUntil := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	for _, c := range []struct {
		sourceUse
		want []string
	}{
		{sourceUse{"a running instance, idle", func(t *testing.T, path string) {
			db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
		}}, []string{fmt.Sprintf("open in process %d", os.Getpid())}},
		{sourceUse{"a running instance running a periodic job", func(t *testing.T, path string) {
			db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			r := runPeriodic(t, db)
			t.Cleanup(func() { r.Stop() })
		}}, []string{fmt.Sprintf("open in process %d", os.Getpid()), "migrate_test_sweep", "leased to caddy-host:4242:abc"}},
		{sourceUse{"a crashed instance's lease", func(t *testing.T, path string) {
			leaseJob(t, path, "relay_issue", "crashed-host:99:xyz", leaseUntil.Add(-time.Minute))
		}}, []string{"relay_issue", "leased to crashed-host:99:xyz", "until " + leaseUntil.UTC().Format(time.RFC3339), "crashed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := sourceWithAnAccount(t)
			c.leave(t, path)
			dsn := pgtest.DSN(t)
			out, err := runCLI("migrate-store", "--from", path, "--to", dsn)
			if err == nil {
				t.Fatalf("migrate-store copied a source in use:\n%s", out)
			}
			for _, w := range append(c.want, "stop Caddy") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q does not say %q", err, w)
				}
			}
			raw, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			var accounts int
			if err := raw.QueryRow(`SELECT COUNT(*) FROM accounts`).Scan(&accounts); err != nil || accounts != 0 {
				t.Errorf("the target holds %d accounts (%v); want none copied", accounts, err)
			}
		})
	}
}

// A source whose Caddy stopped — its runner released the leases of the
// jobs it ran — or crashed long enough ago that its leases lapsed is
// copied.
func TestMigrateStoreCopiesASourceWhoseInstanceStoppedOrWhoseLeasesLapsed(t *testing.T) {
	for _, c := range []sourceUse{
		{"an instance stopped while a periodic job ran", func(t *testing.T, path string) {
			db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := runPeriodic(t, db)
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}},
		{"a crashed instance's lease, lapsed", func(t *testing.T, path string) {
			leaseJob(t, path, "relay_issue", "crashed-host:99:xyz", time.Now().Add(-2*time.Minute))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := emptySQLiteStore(t)
			c.leave(t, path)
			if out, err := runCLI("migrate-store", "--from", path, "--to", pgtest.DSN(t)); err != nil || !strings.Contains(out, "every count matches") {
				t.Fatalf("migrate-store: %v\n%s", err, out)
			}
		})
	}
}

// migrate-store refuses a source in use also when --from names it by
// another name than the running instance does: through a symlink (SQLite
// opens, and locks, the -shm file beside the file the link resolves to,
// not beside the link) or a hard link (the -shm file is beside the other
// name; no path leads from this one to it).
func TestMigrateStoreRefusesASourceInUseNamedByAnotherName(t *testing.T) {
	for _, c := range []struct {
		name string
		link func(target, link string) error
	}{
		{"a symlink", os.Symlink},
		{"a hard link", os.Link},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := sourceWithAnAccount(t)
			db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			link := filepath.Join(t.TempDir(), "link.db")
			if err := c.link(path, link); err != nil {
				t.Fatal(err)
			}
			out, err := runCLI("migrate-store", "--from", link, "--to", pgtest.DSN(t))
			if err == nil {
				t.Fatalf("migrate-store copied a source in use, named through %s:\n%s", c.name, out)
			}
			if !strings.Contains(err.Error(), "open in process") {
				t.Errorf("the refusal %q does not say the source is open", err)
			}
		})
	}
}
