package caddyacmeproxy

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to look at a database from outside the store

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// validateDialect is a database the app can be configured with, for the
// tests of caddy validate: where a fresh one is, the app's JSON naming
// it, how to open it as the store, and what a write would change in it.
type validateDialect struct {
	name string
	// place makes a fresh, empty place for a database.
	place func(t *testing.T) string
	// app is the app's JSON naming the database at place.
	app  func(place string) map[string]any
	open func(ctx context.Context, place string) (*store.DB, error)
	// state describes everything at place that a write would change.
	state func(t *testing.T, place string) string
	// raw opens place with database/sql, from outside the store.
	raw func(t *testing.T, place string) *sql.DB
}

var validateDialects = []validateDialect{
	{
		name: "sqlite",
		// In a directory that does not exist yet: the store would
		// create it too.
		place: func(t *testing.T) string { return filepath.Join(t.TempDir(), "db", "acme_proxy.db") },
		app:   func(place string) map[string]any { return map[string]any{"database": place} },
		open: func(ctx context.Context, place string) (*store.DB, error) {
			return store.OpenSQLite(ctx, place, store.SQLiteOptions{})
		},
		state: sqliteDirState,
		raw: func(t *testing.T, place string) *sql.DB {
			raw, err := sql.Open("sqlite", place)
			if err != nil {
				t.Fatal(err)
			}
			return raw
		},
	},
	{
		name:  "postgres",
		place: func(t *testing.T) string { return pgtest.DSN(t) },
		app:   func(place string) map[string]any { return map[string]any{"postgres": place} },
		open: func(ctx context.Context, place string) (*store.DB, error) {
			return store.OpenPostgres(ctx, place, store.PostgresOptions{})
		},
		state: postgresState,
		raw: func(t *testing.T, place string) *sql.DB {
			raw, err := sql.Open("pgx", place)
			if err != nil {
				t.Fatal(err)
			}
			return raw
		},
	},
}

// sqliteDirState lists the files of the database's directory (its -wal
// and -shm included) with a digest of each; "absent" when the directory
// is not there.
func sqliteDirState(t *testing.T, place string) string {
	t.Helper()
	dir := filepath.Dir(place)
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %x", e.Name(), sha256.Sum256(b)))
	}
	return strings.Join(out, ", ")
}

// postgresState lists the tables of the database with their row counts,
// and the migrations applied.
func postgresState(t *testing.T, dsn string) string {
	t.Helper()
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	var out []string
	for _, name := range tables {
		var n int
		if err := raw.QueryRow(`SELECT COUNT(*) FROM "` + name + `"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s:%d", name, n))
		if name == "schema_migrations" {
			var versions string
			if err := raw.QueryRow(`SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations`).Scan(&versions); err != nil {
				t.Fatal(err)
			}
			out = append(out, "versions "+versions)
		}
	}
	return strings.Join(out, ", ")
}

// validateConfig is a config with the acme_proxy app on the database the
// app JSON names, Caddy's storage in dir, and one HTTP server on port
// whose route runs handlers.
func validateConfig(t *testing.T, dir string, app map[string]any, port int, handlers []map[string]any) []byte {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"writer": map[string]any{"output": "file", "filename": filepath.Join(dir, "caddy.log")}}}},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(dir, "storage")},
		"apps": map[string]any{
			"acme_proxy": app,
			"pki":        map[string]any{"certificate_authorities": map[string]any{"local": map[string]any{"install_trust": false}}},
			"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
				"automatic_https": map[string]any{"disable": true},
				"routes":          []any{map[string]any{"handle": handlers}},
			}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// caddyValidate checks cfg as `caddy validate` (and `caddy adapt --validate`)
// do.
func caddyValidate(t *testing.T, cfgJSON []byte) error {
	t.Helper()
	var cfg *caddy.Config
	if err := caddy.StrictUnmarshalJSON(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	// A validation that fails leaves Caddy's default logger on this
	// config's log file, in the test's directory: the next config's
	// switch of logger writes its "redirected" line there, making the
	// directory again after the test removed it — a directory left in
	// the temporary directory by every run. Before the test's directory
	// goes (cleanups run last first), the logger is moved off it.
	t.Cleanup(func() { _ = caddy.Validate(&caddy.Config{}) })
	return caddy.Validate(cfg)
}

// goodHandlers are a profile and the operator page: every module that
// keeps a key in the database.
var goodHandlers = []map[string]any{
	{"handler": "acme_proxy", "profile": "a"},
	{"handler": "acme_proxy_ui", "prefix": "/ops", "insecure_no_auth": true},
}

// Validating a config writes nothing to its database, whatever it is
// like and whatever the answer: no SQLite file (nor its directory, -wal
// or -shm) is created, no migration applied, no row (key, audit, job)
// written. An operator validating a new binary's config against the
// production database must not upgrade the schema under the instances
// running on it. A config with a bad key still fails, naming the key.
func TestValidatingAConfigWritesNothingToItsDatabase(t *testing.T) {
	ctx := context.Background()
	for _, d := range validateDialects {
		t.Run(d.name, func(t *testing.T) {
			for _, c := range []struct {
				name string
				// setup leaves the database at place as the case needs.
				setup    func(t *testing.T, place string)
				handlers []map[string]any
				wantErr  string
			}{
				{"a fresh database", func(*testing.T, string) {}, goodHandlers, ""},
				{"an up-to-date database", func(t *testing.T, place string) {
					db, err := d.open(ctx, place)
					if err != nil {
						t.Fatal(err)
					}
					db.Close()
				}, goodHandlers, ""},
				{"a database a migration behind this binary", func(t *testing.T, place string) {
					db, err := d.open(ctx, place)
					if err != nil {
						t.Fatal(err)
					}
					db.Close()
					// Its last migration's record removed: the store
					// would apply that migration again.
					raw := d.raw(t, place)
					defer raw.Close()
					if _, err := raw.Exec(`DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)`); err != nil {
						t.Fatal(err)
					}
				}, goodHandlers, ""},
				{"a bad key", func(*testing.T, string) {},
					[]map[string]any{{"handler": "acme_proxy", "profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": -1}}},
					"signer.lifetime"},
			} {
				t.Run(c.name, func(t *testing.T) {
					dir := isolate(t)
					place := d.place(t)
					c.setup(t, place)
					before := d.state(t, place)
					err := caddyValidate(t, validateConfig(t, dir, d.app(place), freePort(t), c.handlers))
					switch {
					case c.wantErr == "" && err != nil:
						t.Fatalf("validate: %v", err)
					case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
						t.Fatalf("validate: %v; want an error naming %s", err, c.wantErr)
					}
					if after := d.state(t, place); after != before {
						t.Errorf("validate wrote to the database:\nbefore %s\nafter  %s", before, after)
					}
				})
			}
		})
	}
}

// Validating against a database a newer binary has migrated fails, saying
// so with both schema versions, and leaves it as it was.
func TestValidatingAgainstANewerSchemaFailsSayingSo(t *testing.T) {
	ctx := context.Background()
	for _, d := range validateDialects {
		t.Run(d.name, func(t *testing.T) {
			dir := isolate(t)
			place := d.place(t)
			db, err := d.open(ctx, place)
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			raw := d.raw(t, place)
			var known int
			if err := raw.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&known); err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Exec(fmt.Sprintf(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (%d, 'from the future', 0)`, known+1)); err != nil {
				t.Fatal(err)
			}
			raw.Close()
			before := d.state(t, place)

			err = caddyValidate(t, validateConfig(t, dir, d.app(place), freePort(t), goodHandlers))
			if want := fmt.Sprintf("schema version %d, this binary knows up to %d", known+1, known); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("validate: %v; want an error saying %q", err, want)
			}
			if after := d.state(t, place); after != before {
				t.Errorf("validate wrote to the database:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// Running a config after validating it creates and migrates the database
// as running it always did, before the profile answers.
func TestRunningAConfigAfterValidatingItMigratesTheDatabaseAndServes(t *testing.T) {
	for _, d := range validateDialects {
		t.Run(d.name, func(t *testing.T) {
			dir := isolate(t)
			place := d.place(t)
			port := freePort(t)
			cfg := validateConfig(t, dir, d.app(place), port, goodHandlers)
			if err := caddyValidate(t, cfg); err != nil {
				t.Fatalf("validate: %v", err)
			}
			load(t, cfg)

			url := fmt.Sprintf("http://127.0.0.1:%d/acme/a/directory", port)
			if status, body := getEventually(t, http.DefaultClient, url); status != http.StatusOK {
				t.Fatalf("GET %s: status %d, body %s", url, status, body)
			}
			if got, want := schemaVersion(t, d, place), freshSchemaVersion(t, d); got != want {
				t.Errorf("after caddy run the database is at schema version %d; want %d, every migration this binary knows", got, want)
			}
		})
	}
}

// schemaVersion reads the schema version of the database at place.
func schemaVersion(t *testing.T, d validateDialect, place string) int {
	t.Helper()
	raw := d.raw(t, place)
	defer raw.Close()
	var v int
	if err := raw.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatalf("reading the schema version: %v", err)
	}
	return v
}

// freshSchemaVersion is the schema version of a database the store has
// just created: every migration this binary knows.
func freshSchemaVersion(t *testing.T, d validateDialect) int {
	t.Helper()
	place := d.place(t)
	db, err := d.open(context.Background(), place)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	return schemaVersion(t, d, place)
}
