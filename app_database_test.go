package caddyacmeproxy

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
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

func fieldStrings(m map[string]any) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+strings.TrimSpace(strings.ReplaceAll(fmt.Sprint(v), "\n", " ")))
	}
	return out
}
