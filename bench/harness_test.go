//go:build unix

package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/acmeproxy/caddy-acme-proxy"
	"github.com/acmeproxy/caddy-acme-proxy/internal/freeport"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// benchZone is the DNS zone every certificate name lies under; the
// benchmark's DNS server answers A 127.0.0.1 for all of it.
const benchZone = "bench.example.com"

// Paths of the two ACME servers on the one HTTPS site.
const (
	proxyPrefix  = "/proxy/bench" // acme_proxy, profile "bench"
	serverPrefix = "/acme/local"  // acme_server: /acme/ + its CA id
)

// Server names, as they appear in sub-benchmark names.
const (
	acmeProxy  = "acme_proxy"
	acmeServer = "acme_server"
)

// caddyfile is the one Caddy of the benchmark: an HTTPS site on 127.0.0.1
// serving acme_server (Caddy's own) and acme_proxy (this plugin) side by
// side, both signing with Caddy's local CA, both resolving names through
// the benchmark's DNS server, both validating http-01 on port 80.
const caddyfile = `{
	admin 127.0.0.1:%[7]d
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	local_certs
	default_bind 127.0.0.1
	http_port %[3]d
	https_port %[4]d
	auto_https disable_redirects
	log {
		output %[6]s
		level INFO
	}
	acme_proxy {
		database %[2]s
	}
}

https://127.0.0.1:%[4]d {
%[10]s	acme_proxy {
		profile bench
		prefix ` + proxyPrefix + `
		signer local_ca {
			ca local
			lifetime 12h
		}
		resolvers 127.0.0.1:%[5]d
		validation_ports {
			http %[8]d
		}
	}
	respond /floor/* 200 {
		body "` + floorBody + `"
	}
%[9]s}
`

// acmeServerBlock is acme_server's handler, on the site of the caddyfile
// or, with ACMEPROXY_BENCH_PROCESS=separate, alone on the site of
// serverCaddyfile; %[1]d is the benchmark's DNS port.
const acmeServerBlock = `	acme_server {
		ca local
		lifetime 12h
		resolvers 127.0.0.1:%[1]d
	}
`

// serverCaddyfile is acme_server's own Caddy, for
// ACMEPROXY_BENCH_PROCESS=separate: the same global options as the
// caddyfile's but its own storage (its own local CA), ports and admin
// endpoint, and no acme_proxy. %[1]s storage, %[2]d http port, %[3]d https
// port, %[4]s log output, %[5]d admin port, %[6]s acme_server's block.
const serverCaddyfile = `{
	admin 127.0.0.1:%[5]d
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	local_certs
	default_bind 127.0.0.1
	http_port %[2]d
	https_port %[3]d
	auto_https disable_redirects
	log {
		output %[4]s
		level INFO
	}
}

https://127.0.0.1:%[3]d {
%[6]s}
`

// harness is the process-wide fixture of the benchmarks: Caddy is
// process-global state, so it is loaded once, on the first benchmark that
// needs it, and stopped by TestMain.
type harness struct {
	dir string
	// admin is the base URL of Caddy's admin endpoint (the acme_proxy
	// admin API, /debug/pprof).
	admin string
	// caddy is Caddy as its own process (ACMEPROXY_BENCH_PROCESS=1 or
	// separate); nil when Caddy runs in this process.
	caddy *caddyProcess
	// serverCaddy is acme_server's own Caddy process
	// (ACMEPROXY_BENCH_PROCESS=separate), with its admin endpoint; nil
	// when acme_server shares the one Caddy.
	serverCaddy *caddyProcess
	serverAdmin string
	// http01Port is where the http-01 responder listens (80).
	http01Port int
	// dnsAddr is the benchmark's DNS server (host:port), dnsPort its port.
	dnsAddr string
	dnsPort int
	// pgDSN is acme_proxy's PostgreSQL database
	// (ACMEPROXY_BENCH_DATABASE=postgres), or "" for its SQLite file.
	pgDSN string
	// fleet is BenchmarkIssuanceTwoInstances' pair of instances.
	fleet   *benchFleet
	roots   *x509.CertPool
	dirURLs map[string]string // server name → directory URL
	// chainRoots are the roots a server's certificates chain to, where
	// they are not Caddy's local root (Pebble's, directly or relayed).
	chainRoots map[string]*x509.CertPool
	// pebbleTLS is the TLS certificate of the relay benchmark's Pebble.
	pebbleTLS *x509.Certificate
	// tokens maps an http-01 token to its *http01Answer.
	tokens sync.Map
	// timeline notes requests for ACMEPROXY_BENCH_TIMELINE=1.
	timeline *timeline
	// upstream counts the relay's requests to Pebble.
	upstream upstreamCounts
	// alt, while a sub-benchmark sets it, classes run's certificates by
	// the windows of an alternation.
	alt *alternation
	// altServer, while a sub-benchmark sets it with alt, is the server
	// run's clients get their certificates from in the off windows (the
	// server run is given serves the on ones).
	altServer string

	skip    string // why the benchmarks cannot run here
	err     error
	cleanup []func()
}

var (
	harnessOnce sync.Once
	theHarness  *harness
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChildCaddy())
	}
	code := m.Run()
	if theHarness != nil {
		theHarness.close()
	}
	// After Caddy stopped: it was using the cluster.
	if err := pgtest.Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// getHarness starts the fixture the first time and skips or fails b if it
// could not start.
func getHarness(b *testing.B) *harness {
	b.Helper()
	harnessOnce.Do(func() {
		theHarness = &harness{dirURLs: map[string]string{}, chainRoots: map[string]*x509.CertPool{}, timeline: newTimeline()}
		if err := theHarness.start(); err != nil && theHarness.skip == "" {
			theHarness.err = err
		}
	})
	h := theHarness
	if h.skip != "" {
		b.Skip(h.skip)
	}
	if h.err != nil {
		b.Fatalf("benchmark fixture: %v", h.err)
	}
	return h
}

func (h *harness) close() {
	for i := len(h.cleanup) - 1; i >= 0; i-- {
		h.cleanup[i]()
	}
	h.cleanup = nil
}

func (h *harness) start() error {
	// The responder first: without port 80 there is no comparison, since
	// acme_server cannot be told another port.
	// ACMEPROXY_BENCH_HTTP01_PORT moves it, for the benchmarks of
	// acme_proxy alone (BenchmarkScale) while port 80 is taken.
	var err error
	h.http01Port = 80
	if v := os.Getenv("ACMEPROXY_BENCH_HTTP01_PORT"); v != "" {
		if h.http01Port, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("ACMEPROXY_BENCH_HTTP01_PORT=%q: %w", v, err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(h.http01Port)))
	if err != nil {
		h.skip = fmt.Sprintf("the http-01 responder needs 127.0.0.1:80, because Caddy's acme_server validates http-01 on port 80 only (run as root, with port 80 free): %v", err)
		return err
	}
	h.serveHTTP01(ln)

	dnsAddr, err := h.startDNS()
	if err != nil {
		return err
	}
	h.dnsAddr = dnsAddr
	_, p, _ := net.SplitHostPort(dnsAddr)
	dnsPort, _ := strconv.Atoi(p)
	h.dnsPort = dnsPort
	h.useDNSForDefaultResolver(dnsAddr)

	base := os.Getenv("ACMEPROXY_BENCH_DIR")
	if h.dir, err = os.MkdirTemp(base, "acmeproxy-bench-"); err != nil {
		return err
	}
	h.cleanup = append(h.cleanup, func() {
		if os.Getenv("ACMEPROXY_BENCH_KEEP") == "1" {
			fmt.Fprintf(os.Stderr, "bench: kept %s\n", h.dir)
			return
		}
		os.RemoveAll(h.dir)
	})
	// Caddy keeps files outside the configured storage (instance.uuid,
	// and acme_server's bbolt database under its data dir): keep them in
	// the temporary directory too.
	h.setenv("XDG_DATA_HOME", filepath.Join(h.dir, "data"))
	h.setenv("XDG_CONFIG_HOME", filepath.Join(h.dir, "config"))

	httpPort, err := freePort()
	if err != nil {
		return err
	}
	httpsPort, err := freePort()
	if err != nil {
		return err
	}
	logOutput := caddyLogOutput()
	database := filepath.Join(h.dir, "acme_proxy.db")
	switch db := os.Getenv("ACMEPROXY_BENCH_DATABASE"); db {
	case "", "sqlite":
	case "postgres":
		// PostgreSQL on this machine, durable (fsync on), started for the
		// benchmark; its data directory is under the system's temporary
		// directory, as the SQLite file is by default.
		pgtest.Durable = true
		dsn, err := pgtest.ProcessDSN()
		if errors.Is(err, pgtest.ErrNoPostgres) && os.Getenv("ACMEPROXY_E2E") != "1" {
			h.skip = fmt.Sprintf("ACMEPROXY_BENCH_DATABASE=postgres: %v", err)
			return err
		}
		if err != nil {
			return err
		}
		database = `postgres "` + dsn + `"`
		h.pgDSN = dsn
	default:
		return fmt.Errorf("ACMEPROXY_BENCH_DATABASE=%q: want sqlite or postgres", db)
	}
	relayBlock, err := h.startPebble(dnsPort)
	if err != nil {
		return fmt.Errorf("starting the relay benchmark's Pebble: %w", err)
	}
	adminPort, err := freePort()
	if err != nil {
		return err
	}
	h.admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	serverBlock := fmt.Sprintf(acmeServerBlock, dnsPort)
	serverSite := fmt.Sprintf("https://127.0.0.1:%d", httpsPort)
	mode := os.Getenv("ACMEPROXY_BENCH_PROCESS")
	switch mode {
	case "", "0", "1":
	case "separate":
		// acme_server in a Caddy of its own, so that its CPU and peak RSS
		// are its own, as when each server is a `caddy run` of its own.
		if serverSite, err = h.startServerCaddy(serverBlock, logOutput, dnsAddr); err != nil {
			return err
		}
		serverBlock = ""
	default:
		return fmt.Errorf("ACMEPROXY_BENCH_PROCESS=%q: want 1 or separate", mode)
	}
	cfgFile := fmt.Sprintf(caddyfile, filepath.Join(h.dir, "storage"), database,
		httpPort, httpsPort, dnsPort, logOutput, adminPort, h.http01Port, relayBlock, serverBlock)
	if mode == "1" || mode == "separate" {
		if h.caddy, err = startCaddyProcess(h.dir, cfgFile, dnsAddr); err != nil {
			return err
		}
		h.cleanup = append(h.cleanup, h.caddy.stop)
	} else {
		cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgFile), nil)
		if err != nil {
			return fmt.Errorf("adapting the Caddyfile: %w", err)
		}
		for _, w := range warnings {
			fmt.Fprintf(os.Stderr, "bench: Caddyfile warning: line %d: %s\n", w.Line, w.Message)
		}
		if err := caddy.Load(cfgJSON, true); err != nil {
			return fmt.Errorf("caddy.Load: %w", err)
		}
		h.cleanup = append(h.cleanup, func() {
			if err := caddy.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: caddy.Stop: %v\n", err)
			}
		})
	}

	root, err := h.waitForFile(filepath.Join(h.dir, "storage", "pki", "authorities", "local", "root.crt"))
	if err != nil {
		return fmt.Errorf("the pki app wrote no root: %w", err)
	}
	h.roots = x509.NewCertPool()
	if !h.roots.AppendCertsFromPEM(root) {
		return errors.New("root.crt holds no certificate")
	}
	if h.serverCaddy != nil {
		root, err := h.waitForFile(filepath.Join(h.dir, "acme_server", "storage", "pki", "authorities", "local", "root.crt"))
		if err != nil {
			return fmt.Errorf("acme_server's Caddy wrote no root: %w", err)
		}
		if !h.roots.AppendCertsFromPEM(root) {
			return errors.New("acme_server's root.crt holds no certificate")
		}
	}
	h.roots.AddCert(h.pebbleTLS) // the clients talking to Pebble directly trust it
	site := fmt.Sprintf("https://127.0.0.1:%d", httpsPort)
	h.dirURLs[acmeProxy] = site + proxyPrefix + "/directory"
	h.dirURLs[acmeServer] = serverSite + serverPrefix + "/directory"
	h.dirURLs[relayed] = site + relayPrefix + "/directory"
	h.dirURLs[relayedPrepared] = site + relayPreparedPrefix + "/directory"
	for _, u := range h.dirURLs {
		if err := h.waitForDirectory(u); err != nil {
			return err
		}
	}
	return nil
}

// startServerCaddy starts acme_server's own Caddy process
// (ACMEPROXY_BENCH_PROCESS=separate) in h.dir/acme_server, serving block,
// and returns its site's URL.
func (h *harness) startServerCaddy(block, logOutput, dnsAddr string) (string, error) {
	dir := filepath.Join(h.dir, "acme_server")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	ports, err := freePorts(3)
	if err != nil {
		return "", err
	}
	httpPort, httpsPort, adminPort := ports[0], ports[1], ports[2]
	cfg := fmt.Sprintf(serverCaddyfile, filepath.Join(dir, "storage"), httpPort, httpsPort, logOutput, adminPort, block)
	p, err := startCaddyProcess(dir, cfg, dnsAddr)
	if err != nil {
		return "", fmt.Errorf("starting acme_server's Caddy: %w", err)
	}
	h.serverCaddy, h.serverAdmin = p, fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	h.cleanup = append(h.cleanup, p.stop)
	return fmt.Sprintf("https://127.0.0.1:%d", httpsPort), nil
}

// process is the Caddy process that serves server, with its admin
// endpoint: acme_server's own with ACMEPROXY_BENCH_PROCESS=separate, else
// the one Caddy (nil when it runs in this process).
func (h *harness) process(server string) (*caddyProcess, string) {
	if server == acmeServer && h.serverCaddy != nil {
		return h.serverCaddy, h.serverAdmin
	}
	return h.caddy, h.admin
}

// waitForFile reads a file Caddy writes as it starts (at once when Caddy
// runs in this process: caddy.Load returns after provisioning).
func (h *harness) waitForFile(path string) ([]byte, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil || h.caddy == nil || time.Now().After(deadline) {
			return b, err
		}
		if err := h.caddy.exited(); err != nil {
			return nil, err
		}
		if h.serverCaddy != nil {
			if err := h.serverCaddy.exited(); err != nil {
				return nil, fmt.Errorf("acme_server's %w", err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// setenv sets an environment variable until the fixture closes.
func (h *harness) setenv(key, value string) {
	old, had := os.LookupEnv(key)
	os.Setenv(key, value)
	h.cleanup = append(h.cleanup, func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	})
}

// http01Answer is what the responder serves for one token, and when it
// was first fetched.
type http01Answer struct {
	keyAuth string
	fetched atomic.Int64 // Unix nanoseconds; 0 until fetched
}

// serveHTTP01 answers http-01 challenges from h.tokens, as a client's
// standalone responder would. Its goroutines carry the pprof label
// role=responder.
func (h *harness) serveHTTP01(ln net.Listener) {
	const prefix = "/.well-known/acme-challenge/"
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, ok := strings.CutPrefix(r.URL.Path, prefix)
			v, found := h.tokens.Load(token)
			if !ok || !found {
				http.NotFound(w, r)
				return
			}
			a := v.(*http01Answer)
			a.fetched.CompareAndSwap(0, time.Now().UnixNano())
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, a.keyAuth)
		}),
	}
	done := make(chan struct{})
	pprof.Do(context.Background(), pprof.Labels("role", "responder"), func(context.Context) {
		go func() {
			defer close(done)
			_ = srv.Serve(ln)
		}()
	})
	h.cleanup = append(h.cleanup, func() {
		_ = srv.Close()
		<-done
	})
}

// startDNS runs the test DNS server for benchZone (A 127.0.0.1 for every
// name under it, NXDOMAIN outside it).
func (h *harness) startDNS() (string, error) {
	d, err := testdns.Start(benchZone)
	if err != nil {
		return "", err
	}
	h.cleanup = append(h.cleanup, d.Close)
	return d.Addr, nil
}

// useDNSForDefaultResolver points this process's default resolver at the
// benchmark's DNS server. acme_server's resolvers are used for dns-01 TXT
// lookups only; its http-01 fetch resolves the name through
// net.DefaultResolver, which must find 127.0.0.1 for names under
// benchZone just as acme_proxy's validator does through its resolvers.
func (h *harness) useDNSForDefaultResolver(addr string) {
	r := net.DefaultResolver
	oldPreferGo, oldDial := r.PreferGo, r.Dial
	var d net.Dialer
	r.PreferGo = true
	r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	h.cleanup = append(h.cleanup, func() { r.PreferGo, r.Dial = oldPreferGo, oldDial })
}

// waitForDirectory waits until an ACME directory answers 200 over HTTPS
// trusted through the local root: Caddy obtains the site's certificate in
// the background after Load.
func (h *harness) waitForDirectory(url string) error {
	c := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.roots}},
	}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no other caller in this process was given: the ports of a Caddy
// config are picked before it binds any, and asking the kernel for port 0
// each time may return one port twice (a run once met "server gave HTTP
// response to HTTPS client" at its HTTPS port, as when the admin endpoint
// has taken it).
func freePort() (int, error) { return freeport.TCP("127.0.0.1") }

// freePorts is n ports of freePort, for a Caddy's http, https and admin
// listeners.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// caddyLogOutput is where a benchmark's Caddy logs: discarded (encoded
// at INFO, as in production) unless ACMEPROXY_BENCH_LOG=stderr.
func caddyLogOutput() string {
	if os.Getenv("ACMEPROXY_BENCH_LOG") == "stderr" {
		return "stderr"
	}
	return "discard"
}
