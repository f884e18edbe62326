package caddyacmeproxy

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/jackc/pgx/v5/stdlib"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// openSQLiteFiles counts this process's open descriptors on the SQLite
// file at path and its -wal and -shm.
func openSQLiteFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count open files: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue
		}
		if target == path || target == path+"-wal" || target == path+"-shm" {
			n++
		}
	}
	return n
}

// postgresSessions counts the sessions on the database dsn names, other
// than the one counting them.
func postgresSessions(t *testing.T, dsn string) int {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(),
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatalf("counting the database's sessions: %v", err)
	}
	return n
}

// A reload that fails to provision leaves the old config serving and
// nothing of the failed config behind: the database it named (another
// one than the serving config's) is not held open, on either dialect.
func TestAReloadThatFailsLeavesTheDatabaseItNamedClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		// place makes the failed config's database and returns its
		// Caddyfile value and what counts the process's hold on it.
		place func(t *testing.T, dir string) (database string, open func(t *testing.T) int)
	}{
		{"sqlite", func(t *testing.T, dir string) (string, func(t *testing.T) int) {
			path := filepath.Join(dir, "other.db")
			db, err := store.OpenSQLite(t.Context(), path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return path, func(t *testing.T) int { return openSQLiteFiles(t, path) }
		}},
		{"postgres", func(t *testing.T, _ string) (string, func(t *testing.T) int) {
			dsn := pgtest.DSN(t)
			db, err := store.OpenPostgres(t.Context(), dsn, store.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return `postgres "` + dsn + `"`, func(t *testing.T) int { return postgresSessions(t, dsn) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t)}
			env.load(t, cfg)
			other, open := tc.place(t, env.Dir)
			// The place's own session was just closed: on PostgreSQL its
			// backend leaves pg_stat_activity a moment later (below).
			if n := settled(t, func() int { return open(t) }, 0); n != 0 {
				t.Fatalf("%d open before the reload; want none", n)
			}

			// The acme_proxy app of the failed config provisions (its
			// store prepared and checked), then its second handler for
			// the profile fails the load.
			inUse := databasesInUse()
			bad := cfg
			bad.ExtraProfiles = "\tacme_proxy {\n\t\tprofile " + e2eProfile + "\n\t}"
			serving := env.Database
			env.Database = other
			text := env.caddyfile(t, bad)
			env.Database = serving
			badJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(text), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			if err := caddy.Load(badJSON, true); err == nil || !strings.Contains(err.Error(), "declared by two") {
				t.Fatalf("reloading a config declaring the profile twice: %v; want its error", err)
			}

			// A closed PostgreSQL session's backend leaves
			// pg_stat_activity a moment after the client hung up.
			if n := settled(t, func() int { return open(t) }, 0); n != 0 {
				t.Errorf("%d open on the failed config's database after the reload failed; want none", n)
			}
			// Nor is it kept for a later load: the databases in use
			// are those in use before.
			if after := databasesInUse(); !slices.Equal(after, inUse) {
				t.Errorf("databases in use after the failed reload: %q; want those before it, %q", after, inUse)
			}
			if status, body := getEventually(t, env.client, env.directoryURL(e2eProfile)); status != http.StatusOK {
				t.Errorf("the old config's directory after the failed reload: %d %s", status, body)
			}
			if a := started.newest(); a == nil || a.db == nil || !a.db.IsOpen() {
				t.Errorf("no started app with an open store serves after the failed reload")
			}
		})
	}
}

// databasesInUse names the stores the process's configs hold, sorted.
func databasesInUse() []string {
	var out []string
	dbPool.Range(func(_, v any) bool {
		out = append(out, v.(dbCloser).String())
		return true
	})
	slices.Sort(out)
	return out
}

// settled polls count until it is at most want, for up to 10 seconds,
// and returns its last value.
func settled(t *testing.T, count func() int, want int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := count()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// projectGoroutines counts the goroutines running this project's code,
// other than the tests' own, by the function each was started with.
func projectGoroutines() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "caddy-acme-proxy") || strings.Contains(g, "_test.go") {
			continue
		}
		created := ""
		if i := strings.LastIndex(g, "created by "); i >= 0 {
			created = strings.SplitN(g[i+len("created by "):], "\n", 2)[0]
			created = strings.Split(created, " in goroutine")[0]
		}
		out[created]++
	}
	return out
}

// Ten reloads in a row while clients keep asking for nonces leave the
// process holding what one config holds: no goroutine of the project's
// and no database session more.
func TestRepeatedReloadsUnderLoadLeakNoGoroutineNorSession(t *testing.T) {
	for _, tc := range []struct {
		name     string
		database func(t *testing.T, env *e2eEnv) (caddyfileValue string, sessions func(t *testing.T) int)
	}{
		{"sqlite", func(t *testing.T, env *e2eEnv) (string, func(t *testing.T) int) {
			return env.Database, func(t *testing.T) int { return openSQLiteFiles(t, env.Database) }
		}},
		{"postgres", func(t *testing.T, _ *e2eEnv) (string, func(t *testing.T) int) {
			dsn := pgtest.DSN(t)
			return `postgres "` + dsn + `"`, func(t *testing.T) int { return postgresSessions(t, dsn) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			var sessions func(t *testing.T) int
			env.Database, sessions = tc.database(t, env)
			cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t)}
			env.load(t, cfg)
			// One reload first, so that what a reload leaves to end
			// lazily (idle connections) is in the baseline.
			env.load(t, cfg)
			baseG, baseS := projectGoroutines(), sessions(t)

			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			var served, failed atomic.Int64
			for range 2 {
				wg.Go(func() {
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodHead,
							strings.TrimSuffix(env.directoryURL(e2eProfile), "directory")+"new-nonce", nil)
						resp, err := env.client.Do(req)
						if err != nil {
							continue
						}
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							served.Add(1)
						} else {
							failed.Add(1)
						}
					}
				})
			}
			for i := range 10 {
				c := cfg
				if i%2 == 0 {
					c.ExtraProfiles = "\tacme_proxy {\n\t\tprofile second\n\t}"
				}
				env.load(t, c)
			}
			env.load(t, cfg)
			cancel()
			wg.Wait()
			env.client.CloseIdleConnections()
			if served.Load() == 0 {
				t.Fatal("no nonce was served while the config reloaded")
			}
			t.Logf("%d nonces served, %d other answers during the reloads", served.Load(), failed.Load())

			// More goroutines of a kind than before, the pool of warm
			// request goroutines (which grows and idles out with the
			// load) aside.
			leaked := func() map[string]int {
				out := map[string]int{}
				for k, n := range projectGoroutines() {
					if n > baseG[k] && !strings.Contains(k, "internal/warmstack.") {
						out[k] = n - baseG[k]
					}
				}
				return out
			}
			if n := settled(t, func() int { return len(leaked()) }, 0); n != 0 {
				t.Errorf("goroutines of the project more than before the reloads, by the function that started them: %v", leaked())
			}
			if n := settled(t, func() int { return sessions(t) }, baseS); n > baseS {
				t.Errorf("%d sessions on the database after the reloads, %d before", n, baseS)
			}
		})
	}
}

// A reload onto another database closes the old one once the old config
// has stopped, and the admin API then answers from the new one: an order
// of the old database is not listed.
func TestAReloadOntoAnotherDatabaseClosesTheOldOneAndServesTheNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		// old is the first config's database (its Caddyfile value), and
		// open counts what the process holds on it.
		old func(t *testing.T, env *e2eEnv) (database string, open func(t *testing.T) int)
	}{
		{"sqlite", func(t *testing.T, env *e2eEnv) (string, func(t *testing.T) int) {
			path := filepath.Join(env.Dir, "old.db")
			return path, func(t *testing.T) int { return openSQLiteFiles(t, path) }
		}},
		{"postgres", func(t *testing.T, _ *e2eEnv) (string, func(t *testing.T) int) {
			dsn := pgtest.DSN(t)
			return `postgres "` + dsn + `"`, func(t *testing.T) int { return postgresSessions(t, dsn) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
			cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin}
			newDB := env.Database
			var open func(t *testing.T) int
			env.Database, open = tc.old(t, env)
			env.load(t, cfg)
			unloadAdminOnCleanup(t)

			ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
			defer cancel()
			c := newE2EXCrypto(ctx, t, env)
			o, err := c.AuthorizeOrder(ctx, xacme.DomainIDs("old.example.com"))
			if err != nil {
				t.Fatalf("AuthorizeOrder: %v", err)
			}
			id := o.URI[strings.LastIndex(o.URI, "/")+1:]
			if status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/orders", ""); status != http.StatusOK || !strings.Contains(string(body), id) {
				t.Fatalf("GET /acme_proxy/orders before the reload: %d %s; want order %s listed", status, body, id)
			}
			if n := open(t); n == 0 {
				t.Fatal("nothing open on the old database while its config serves")
			}

			env.Database = newDB
			env.load(t, cfg)

			if n := settled(t, func() int { return open(t) }, 0); n != 0 {
				t.Errorf("%d open on the old database after the reload onto another; want none", n)
			}
			status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/orders", "")
			if status != http.StatusOK || strings.Contains(string(body), id) {
				t.Errorf("GET /acme_proxy/orders after the reload: %d %s; want 200 from the new database, without order %s", status, body, id)
			}
		})
	}
}

// A profile a reload removed is served no more: its URLs get what the
// site answers for a path no handler takes (here the site's own 404),
// and the profile kept serves on.
func TestTheURLsOfAProfileAReloadRemovedAreAnsweredByTheSite(t *testing.T) {
	env := newE2EEnv(t)
	cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t)}
	cfg.ExtraProfiles = "\tacme_proxy {\n\t\tprofile second\n\t}\n\trespond 404"
	env.load(t, cfg)
	if status, body := getEventually(t, env.client, env.directoryURL("second")); status != http.StatusOK {
		t.Fatalf("the second profile's directory before the reload: %d %s", status, body)
	}
	cfg.ExtraProfiles = "\trespond 404"
	env.load(t, cfg)
	for _, tc := range []struct {
		profile string
		want    int
	}{
		{"second", http.StatusNotFound},
		{e2eProfile, http.StatusOK},
	} {
		if status, body := getEventually(t, env.client, env.directoryURL(tc.profile)); status != tc.want {
			t.Errorf("GET %s after the reload: %d %s; want %d", env.directoryURL(tc.profile), status, body, tc.want)
		}
	}
}
