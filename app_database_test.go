package caddyacmeproxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// provisionApp provisions a, logging into the returned observer, and
// cleans it up when t ends.
func provisionApp(t *testing.T, a *App) (*observer.ObservedLogs, error) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	core, logs := observer.New(zap.DebugLevel)
	err := a.provision(ctx, zap.New(core))
	t.Cleanup(func() { a.Cleanup() })
	return logs, err
}

// The DSN may carry a password (here: the database name stands in for
// one, given through a placeholder): the app opens the database it names
// once the placeholder is replaced, and its log line names host and
// database, never the DSN.
func TestThePostgresOptionOpensTheStoreItNamesWithPlaceholdersReplaced(t *testing.T) {
	dsn := pgtest.DSN(t)
	dbname := regexp.MustCompile(`dbname=(\S+)`).FindStringSubmatch(dsn)[1]
	t.Setenv("ACMEPROXY_TEST_PGDB", dbname)
	withPlaceholder := strings.Replace(dsn, "dbname="+dbname, "dbname={env.ACMEPROXY_TEST_PGDB}", 1) + " password=s3cret-in-dsn"

	a := &App{Postgres: withPlaceholder}
	logs, err := provisionApp(t, a)
	if err != nil {
		t.Fatal(err)
	}
	startStore(t, a)
	if got := a.db.String(); !strings.HasPrefix(got, "postgres ") || !strings.HasSuffix(got, "/"+dbname) {
		t.Fatalf("store %q; want the postgres database %s", got, dbname)
	}
	opened := logs.FilterMessage("store opened").All()
	if len(opened) != 1 {
		t.Fatalf("%d 'store opened' lines, want 1", len(opened))
	}
	for _, e := range logs.All() {
		line := e.Message + " " + strings.Join(fieldStrings(e.ContextMap()), " ")
		if strings.Contains(line, "s3cret") || strings.Contains(line, "user=") || strings.Contains(line, "{env.") {
			t.Errorf("log line %q repeats the DSN", line)
		}
	}
}

func TestTheAppRefusesBothASQLiteFileAndAPostgresDatabase(t *testing.T) {
	a := &App{AppConfig: acmeproxy.AppConfig{Database: t.TempDir() + "/a.db"}, Postgres: "host=/nonexistent dbname=x"}
	_, err := provisionApp(t, a)
	if err == nil || !strings.Contains(err.Error(), "either database") {
		t.Fatalf("provision: %v; want refused for naming two databases", err)
	}
}

// A SQLite path given through a placeholder is the file the placeholder
// names once replaced: the app opens that one, and creates no file
// literally named {env.X}.
func TestTheSQLiteFileOptionOpensTheFileItNamesWithPlaceholdersReplaced(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("ACMEPROXY_TEST_DBDIR", dir)
	a := &App{AppConfig: acmeproxy.AppConfig{Database: "{env.ACMEPROXY_TEST_DBDIR}/acme.db"}}
	if _, err := provisionApp(t, a); err != nil {
		t.Fatal(err)
	}
	startStore(t, a)
	if _, err := os.Stat(filepath.Join(dir, "acme.db")); err != nil {
		t.Errorf("the file the placeholder names: %v", err)
	}
	if made, _ := filepath.Glob(filepath.Join(dir, "{env.*")); len(made) > 0 {
		t.Errorf("created %q: the placeholder was taken as a name", made)
	}
}

// startStore opens a's store as its Start does, before it starts the
// runner.
func startStore(t *testing.T, a *App) {
	t.Helper()
	if err := a.openStore(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func fieldStrings(m map[string]any) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+strings.TrimSpace(strings.ReplaceAll(fmt.Sprint(v), "\n", " ")))
	}
	return out
}

// Two apps (two configs, or the old and new of a reload) naming one
// SQLite file by different paths — through a symlink to its directory or
// to the file, through a/../b, or through a hard link (a bind mount is
// the same file under another name too) — share one store: two would each
// run their own writer and group commit on one file, contending for its
// lock with SQLITE_BUSY, and each trust caches the other's writes do not
// update.
func TestAppsNamingOneSQLiteFileByTwoNamesShareOneStore(t *testing.T) {
	for _, c := range []struct {
		name string
		// paths returns the paths the two apps name, in dir.
		paths func(t *testing.T, dir string) (string, string)
		// between, when set, runs after the first app opened the store
		// and before the second names it.
		between func(t *testing.T, first, second string)
	}{
		{"one path, the file created by the first app's start", func(t *testing.T, dir string) (string, string) {
			return filepath.Join(dir, "real", "acme.db"), filepath.Join(dir, "real", "acme.db")
		}, nil},
		{"a symlinked directory, before the file exists", func(t *testing.T, dir string) (string, string) {
			mustSymlink(t, filepath.Join(dir, "real"), filepath.Join(dir, "link"))
			return filepath.Join(dir, "real", "acme.db"), filepath.Join(dir, "link", "acme.db")
		}, nil},
		{"a symlink to the file", func(t *testing.T, dir string) (string, string) {
			mustSymlink(t, filepath.Join(dir, "real", "acme.db"), filepath.Join(dir, "acme.db"))
			return filepath.Join(dir, "real", "acme.db"), filepath.Join(dir, "acme.db")
		}, nil},
		{"a/../b where a is a symlink to another directory", func(t *testing.T, dir string) (string, string) {
			// other/sub/.. is other, wherever the name other/sub is.
			if err := os.MkdirAll(filepath.Join(dir, "elsewhere", "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			mustSymlink(t, filepath.Join(dir, "elsewhere", "sub"), filepath.Join(dir, "real", "sub"))
			return filepath.Join(dir, "elsewhere", "acme.db"), filepath.Join(dir, "real", "sub") + "/../acme.db"
		}, nil},
		{"a hard link to a store that exists", func(t *testing.T, dir string) (string, string) {
			first := filepath.Join(dir, "real", "acme.db")
			db, err := store.OpenSQLite(context.Background(), first, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			mustLink(t, first, filepath.Join(dir, "other", "acme.db"))
			return first, filepath.Join(dir, "other", "acme.db")
		}, nil},
		{"a hard link made to the file the first app created", func(t *testing.T, dir string) (string, string) {
			return filepath.Join(dir, "real", "acme.db"), filepath.Join(dir, "other", "linked.db")
		}, func(t *testing.T, first, second string) { mustLink(t, first, second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "real"), 0o700); err != nil {
				t.Fatal(err)
			}
			first, second := c.paths(t, dir)
			a := &App{AppConfig: acmeproxy.AppConfig{Database: first}}
			if _, err := provisionApp(t, a); err != nil {
				t.Fatal(err)
			}
			// It runs: its Start creates the file (Provision creates
			// nothing) before a reload names it again.
			startStore(t, a)
			if c.between != nil {
				c.between(t, first, second)
			}
			b := &App{AppConfig: acmeproxy.AppConfig{Database: second}}
			if _, err := provisionApp(t, b); err != nil {
				t.Fatal(err)
			}
			if a.db != b.db {
				t.Errorf("%s and %s opened two stores (%s, %s); want one", first, second, a.db, b.db)
			}
		})
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, link); err != nil {
		t.Fatal(err)
	}
}

// Caddy starts a config's apps in no set order, so the http app may take
// requests before this app has opened (and migrated) its store at Start:
// they wait for it, and go on once it has.
func TestRequestsBeforeTheAppHasOpenedItsStoreWaitForIt(t *testing.T) {
	a := &App{AppConfig: acmeproxy.AppConfig{Database: filepath.Join(t.TempDir(), "acme.db")}}
	if _, err := provisionApp(t, a); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if a.awaitStart(gone) {
		t.Fatal("a request passed before the store was opened")
	}
	waited := make(chan bool, 1)
	go func() { waited <- a.awaitStart(context.Background()) }()
	startStore(t, a)
	if !<-waited {
		t.Fatal("a request waiting for the store was turned away once it opened")
	}
	if !a.awaitStart(gone) {
		t.Fatal("a request after the store opened waited")
	}
}

// An app that stops without having started (another app of its config
// failed to start) lets the requests waiting for it go, to be answered 503.
func TestRequestsWaitingForAnAppThatStopsWithoutStartingAreLetGo(t *testing.T) {
	a := &App{AppConfig: acmeproxy.AppConfig{Database: filepath.Join(t.TempDir(), "acme.db")}}
	if _, err := provisionApp(t, a); err != nil {
		t.Fatal(err)
	}
	waited := make(chan bool, 1)
	go func() { waited <- a.awaitStart(context.Background()) }()
	if err := a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if <-waited {
		t.Fatal("a request passed though the app never opened its store")
	}
}

// A reload whose store, checked at Provision, turned out newer than the
// binary by Start (another instance upgraded it meanwhile) fails to start
// naming the file and both versions, lets no request in, and releases the
// store at Cleanup: Caddy keeps the old config, nothing of the new one
// left open.
func TestAnAppWhoseStoreTurnedNewerBeforeStartFailsNamingItAndLeavesItClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acme.db")
	db, err := store.OpenSQLite(context.Background(), path, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	a := &App{AppConfig: acmeproxy.AppConfig{Database: path}}
	if _, err := provisionApp(t, a); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (99999, 'from a newer binary', 0)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	err = a.Start()
	if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "99999") {
		t.Fatalf("Start: %v; want the schema too new, naming %s and its version", err, path)
	}
	// A request waiting for the app is let go at once, to be answered
	// 503, rather than at its deadline.
	waiting, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if a.awaitStart(waiting) || waiting.Err() != nil {
		t.Errorf("a request waiting for the app was let in, or waited until its deadline (%v); want let go at once", waiting.Err())
	}
	if err := a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if n, ok := dbPool.References(a.dbKey); ok {
		t.Errorf("after Cleanup the store is still held (%d references); want it closed", n)
	}
}
