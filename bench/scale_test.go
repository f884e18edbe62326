//go:build unix

package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/seed"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// BenchmarkScale measures what a large database costs, in one run and in
// this order (the sub-benchmarks share the one database):
//
//   - issuance/db=empty: acme_proxy at 8 clients before anything is seeded;
//
//   - seed: ACMEPROXY_BENCH_ORDERS issued orders (default 200,000; see
//     internal/seed for what each holds), ACMEPROXY_BENCH_REVOKED of them
//     revoked (default 100,000) on the CRL of the CA acme_proxy issues
//     from, written into Caddy's database while it runs (SQLite, or
//     PostgreSQL with ACMEPROXY_BENCH_DATABASE=postgres, then analyzed);
//
//   - issuance/db=seeded: the same issuance again;
//
//   - search/by=…: the admin API's order search (GET /acme_proxy/orders,
//     limit 50) by identifier, account, serial, status, and unfiltered,
//     one request per op;
//
//   - crl/regenerate: POST /acme_proxy/crl/bench/regenerate, reported as
//     s/regen (at most 10 of them, whatever b.N) with the CRL's size, and
//     a conditional GET of the CRL answered 304; on PostgreSQL also the
//     cluster's CPU and the WAL it wrote per regeneration (pg-CPU-s/regen,
//     pg-WAL-MiB/regen), what a regeneration costs the issuances beside it;
//
//   - issuance/db=seeded/crl=regenerating: issuance while the CRL is
//     regenerated once a second (back to back when a regeneration takes
//     longer), as a burst of revocations makes it.
//
//   - issuance/db=seeded/crl=alternating: the same issuance in windows of
//     ACMEPROXY_BENCH_WINDOW (default 4s) taking turns, the CRL
//     regenerated once a second in every other one (see alternation):
//     off-… and on-… are the windows without and with regenerations
//     (certs/s, p50-ms, p99-ms, certs), on/off-p99 the ratio of their
//     p99s — the two measured in the same minutes, where the rows above
//     are measured one after the other.
//
//   - issuance/db=seeded/against=empty: the same issuance in alternating
//     windows between a second Caddy process on an empty database (off)
//     and the seeded one (on), each client with an account at both: the
//     seeded database against an empty one in the same minutes, which
//     issuance/db=empty and issuance/db=seeded, measured minutes apart,
//     are not on a host whose speed changes by the minute.
//
//     go test -run '^$' -bench '^BenchmarkScale$' -benchtime 300x -timeout 60m ./bench/
func BenchmarkScale(b *testing.B) {
	h := getHarness(b)
	const clients = 8
	b.Run("issuance/db=empty", func(b *testing.B) { h.run(b, acmeProxy, clients, false) })
	var s *scaleSeed
	b.Run("seed", func(b *testing.B) {
		s = h.seedScale(b)
		// The seeded revocations leave the CRL stale: the refresh would
		// regenerate it within a minute, in the middle of the next
		// sub-benchmark. Regenerate it now, outside any timed part.
		h.regenerateCRL(b)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(s.orders)/s.took.Seconds(), "orders/s")
	})
	if s == nil || s.err != nil {
		b.Fatal("no seeded database")
	}
	b.Run("issuance/db=seeded", func(b *testing.B) { h.run(b, acmeProxy, clients, false) })
	for _, q := range []struct{ by, query string }{
		{"identifier", "identifier=" + url.QueryEscape(s.sample.Identifier)},
		{"account", "account=" + url.QueryEscape(s.sample.AccountID)},
		{"serial", "serial=" + url.QueryEscape(s.sample.Serial)},
		{"status", "status=valid"},
		{"none", ""},
	} {
		b.Run("search/by="+q.by, func(b *testing.B) {
			for b.Loop() {
				if n := h.searchOrders(b, q.query+"&limit=50"); n == 0 {
					b.Fatalf("the search %s found no order", q.query)
				}
			}
		})
	}
	b.Run("crl/regenerate", func(b *testing.B) {
		n := min(b.N, 10)
		var took time.Duration
		var size int
		pgCPU, wal := h.postgresCPU(b, acmeProxy), h.postgresWAL(b)
		for range n {
			// A regeneration in the second of the last CRL waits for
			// the next (README: Revocation, CRL and audit): start each
			// in a second of its own, so that s/regen is the work, not
			// that wait.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
			t0 := time.Now()
			h.regenerateCRL(b)
			took += time.Since(t0)
		}
		pgCPU, wal = h.postgresCPU(b, acmeProxy)-pgCPU, h.postgresWAL(b)-wal
		size = h.checkCRLConditional(b, s.revoked)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(took.Seconds()/float64(n), "s/regen")
		b.ReportMetric(float64(size)/(1<<20), "CRL-MiB")
		if h.pgDSN != "" {
			b.ReportMetric(pgCPU.Seconds()/float64(n), "pg-CPU-s/regen")
			b.ReportMetric(float64(wal)/float64(n)/(1<<20), "pg-WAL-MiB/regen")
		}
	})
	b.Run("issuance/db=seeded/crl=regenerating", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var regens int
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				h.regenerateCRL(b)
				regens++
				if d := time.Second - time.Since(t0); d > 0 {
					_ = sleep(ctx, d)
				}
			}
		})
		h.run(b, acmeProxy, clients, false)
		cancel()
		wg.Wait()
		b.ReportMetric(float64(regens), "regens")
	})
	b.Run("issuance/db=seeded/crl=alternating", func(b *testing.B) {
		window := envDuration(b, "ACMEPROXY_BENCH_WINDOW", 4*time.Second)
		h.alt = newAlternation(window, window/8)
		defer func() { h.alt = nil }()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var regens int
		wg.Go(func() {
			h.alt.whileOn(ctx, time.Second, func() {
				h.regenerateCRL(b)
				regens++
			})
		})
		h.run(b, acmeProxy, clients, false)
		cancel()
		wg.Wait()
		b.ReportMetric(float64(regens), "regens")
	})
	b.Run("issuance/db=seeded/against=empty", func(b *testing.B) {
		if err := h.startEmptyProxy(); err != nil {
			b.Fatal(err)
		}
		window := envDuration(b, "ACMEPROXY_BENCH_WINDOW", 4*time.Second)
		h.alt = newAlternation(window, window/8)
		h.altServer = emptyProxy
		defer func() { h.alt, h.altServer = nil, "" }()
		h.run(b, acmeProxy, clients, false)
	})
}

// emptyProxy names the second acme_proxy of BenchmarkScale's last part: a
// Caddy process of its own on a database of its own, which only that
// part's certificates fill.
const emptyProxy = "acme_proxy_empty"

// startEmptyProxy starts, once, a second Caddy process serving acme_proxy
// as the benchmark's Caddy does but on an empty database (a SQLite file
// of its own, or a database of its own in the benchmark's PostgreSQL
// cluster) and with a local CA of its own, whose root the clients then
// trust.
func (h *harness) startEmptyProxy() error {
	if h.dirURLs[emptyProxy] != "" {
		return nil
	}
	dir := filepath.Join(h.dir, "empty")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	database := filepath.Join(dir, "acme_proxy.db")
	if h.pgDSN != "" {
		dsn, err := pgtest.ProcessDSN()
		if err != nil {
			return err
		}
		database = `postgres "` + dsn + `"`
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(caddyfile, filepath.Join(dir, "storage"), database,
		ports[0], ports[1], h.dnsPort, caddyLogOutput(), ports[2], h.http01Port, "", "")
	p, err := startCaddyProcess(dir, cfg, h.dnsAddr)
	if err != nil {
		return fmt.Errorf("starting the empty database's Caddy: %w", err)
	}
	h.cleanup = append(h.cleanup, p.stop)
	root, err := h.waitForFile(filepath.Join(dir, "storage", "pki", "authorities", "local", "root.crt"))
	if err != nil {
		return fmt.Errorf("the empty database's Caddy wrote no root: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) || !h.roots.AppendCertsFromPEM(root) {
		return errors.New("the empty database's root.crt holds no certificate")
	}
	u := fmt.Sprintf("https://127.0.0.1:%d%s/directory", ports[1], proxyPrefix)
	if err := h.waitForDirectory(u); err != nil {
		return err
	}
	h.dirURLs[emptyProxy], h.chainRoots[emptyProxy] = u, pool
	return nil
}

// profiled runs fn while, with ACMEPROXY_BENCH_PPROF=<dir>, Caddy's admin
// endpoint records a CPU profile of its first ACMEPROXY_BENCH_PPROF_SECONDS
// (default 5), written to <dir>/<sub-benchmark>.pprof: with
// ACMEPROXY_BENCH_PROCESS=1 or separate, that of the Caddy process serving
// server alone. Give fn more work than that (-benchtime).
func (h *harness) profiled(b *testing.B, server string, fn func()) {
	dir := os.Getenv("ACMEPROXY_BENCH_PPROF")
	if dir == "" || b.N == 1 { // not the framework's b.N=1 probe
		fn()
		return
	}
	secs := envInt(b, "ACMEPROXY_BENCH_PPROF_SECONDS", 5)
	name := filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+".pprof")
	done := make(chan error, 1)
	go func() {
		_, admin := h.process(server)
		resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, secs))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		p, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, p)
		}
		if err == nil {
			err = os.WriteFile(name, p, 0o600)
		}
		done <- err
	}()
	fn()
	if err := <-done; err != nil {
		b.Fatalf("CPU profile of Caddy: %v", err)
	}
}

// postgresWAL is the position of acme_proxy's PostgreSQL cluster in its
// write-ahead log, in bytes (0 on SQLite): its difference over a part is
// the WAL the part wrote, a count the machine's load does not move.
func (h *harness) postgresWAL(b *testing.B) int64 {
	if h.pgDSN == "" {
		return 0
	}
	db, err := sql.Open("pgx", h.pgDSN)
	if err != nil {
		b.Fatalf("opening PostgreSQL: %v", err)
	}
	defer db.Close()
	lsn, err := pgtest.WALPosition(db)
	if err != nil {
		b.Fatal(err)
	}
	return lsn
}

// scaleSeed is what seedScale wrote.
type scaleSeed struct {
	orders, revoked int
	sample          seed.Sample
	took            time.Duration
	err             error
}

var (
	scaleOnce sync.Once
	theScale  scaleSeed
)

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 4s", name, v)
	}
	return d
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// seedScale fills acme_proxy's database once (see BenchmarkScale).
func (h *harness) seedScale(b *testing.B) *scaleSeed {
	scaleOnce.Do(func() {
		s := &theScale
		s.orders = envInt(b, "ACMEPROXY_BENCH_ORDERS", 200000)
		s.revoked = min(envInt(b, "ACMEPROXY_BENCH_REVOKED", 100000), s.orders)
		issuer, err := h.issuerKeyID()
		if err != nil {
			s.err = err
			return
		}
		ctx := context.Background()
		var db *store.DB
		if h.pgDSN != "" {
			db, err = store.OpenPostgres(ctx, h.pgDSN, store.PostgresOptions{})
		} else {
			db, err = store.OpenSQLite(ctx, filepath.Join(h.dir, "acme_proxy.db"), store.SQLiteOptions{})
		}
		if err != nil {
			s.err = err
			return
		}
		defer db.Close()
		t0 := time.Now()
		s.sample, s.err = seed.Run(ctx, db, seed.Options{Profile: "bench", Orders: s.orders, Revoked: s.revoked,
			IssuerKeyID: issuer, Zone: "seed." + benchZone})
		s.took = time.Since(t0)
		if s.err == nil {
			// What autovacuum does after a load like this within a
			// minute, done before the next timed part rather than in
			// it (nothing on SQLite).
			s.err = db.Analyze(ctx)
		}
	})
	if theScale.err != nil {
		b.Fatalf("seeding: %v", theScale.err)
	}
	return &theScale
}

// issuerKeyID is the key id (subject key identifier, hex) of the CA
// acme_proxy issues from: Caddy's local intermediate.
func (h *harness) issuerKeyID() (string, error) {
	p, err := os.ReadFile(filepath.Join(h.dir, "storage", "pki", "authorities", "local", "intermediate.crt"))
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(p)
	if blk == nil {
		return "", fmt.Errorf("intermediate.crt holds no PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(c.SubjectKeyId), nil
}

// admin calls Caddy's admin endpoint.
func (h *harness) adminCall(b *testing.B, method, path string) []byte {
	req, _ := http.NewRequest(method, h.admin+path, nil)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, body)
	}
	return body
}

// searchOrders runs one order search and returns how many orders it found.
func (h *harness) searchOrders(b *testing.B, query string) int {
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(h.adminCall(b, http.MethodGet, "/acme_proxy/orders?"+query), &page); err != nil {
		b.Fatalf("order search: %v", err)
	}
	return len(page.Items)
}

func (h *harness) regenerateCRL(b *testing.B) {
	h.adminCall(b, http.MethodPost, "/acme_proxy/crl/bench/regenerate")
}

// checkCRLConditional fetches the CRL, checks it lists at least want
// entries, asks again with its ETag and wants 304, and returns its size.
// A CRL published between the two (a regeneration the last ones queued
// behind them, or the minute's refresh) is a new CRL, and its 200 is
// right: then the pair is asked again, a few times.
func (h *harness) checkCRLConditional(b *testing.B, want int) int {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.roots}}}
	defer c.CloseIdleConnections()
	u := h.dirURLs[acmeProxy][:len(h.dirURLs[acmeProxy])-len("/directory")] + "/crl"
	get := func(etag string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	for attempt := 1; ; attempt++ {
		resp, der := get("")
		crl, err := x509.ParseRevocationList(der)
		if resp.StatusCode != http.StatusOK || err != nil {
			b.Fatalf("GET %s: %d, %v", u, resp.StatusCode, err)
		}
		if len(crl.RevokedCertificateEntries) < want {
			b.Fatalf("the CRL lists %d entries; want at least %d", len(crl.RevokedCertificateEntries), want)
		}
		again, body := get(resp.Header.Get("ETag"))
		if again.StatusCode == http.StatusNotModified {
			return len(der)
		}
		newer, err := x509.ParseRevocationList(body)
		if again.StatusCode != http.StatusOK || err != nil || newer.Number.Cmp(crl.Number) <= 0 || attempt == 3 {
			b.Fatalf("conditional GET of CRL #%v: %d; want 304", crl.Number, again.StatusCode)
		}
	}
}
