package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// The end-to-end tests run a real Caddy (caddy.Load of an adapted
// Caddyfile) serving the acme_proxy handler on 127.0.0.1, with the default
// local_ca signer on Caddy's local CA, and drive it with real ACME clients.
// Every name under example.com resolves to 127.0.0.1 through an in-process
// DNS server, which the profile uses as its resolver; the profile's
// validation ports are where the test's challenge servers listen. Like the
// other caddy.Load tests they must not use t.Parallel.

// e2eZone is the zone the test DNS server answers for.
const e2eZone = "example.com."

// e2eProfile is the profile every e2e config serves.
const e2eProfile = "e2e"

// e2eWait bounds every wait for something the server does in the
// background (a validation, Caddy obtaining a certificate).
const e2eWait = 30 * time.Second

// ---- DNS ----

// startE2EDNS starts the test DNS server for e2eZone (A 127.0.0.1 for
// every name in it, TXT records a test sets); it stops when the test ends.
func startE2EDNS(t *testing.T) *testdns.Server {
	t.Helper()
	d, err := testdns.Start(e2eZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// ---- Caddy ----

// e2eConfig is what varies between the Caddyfiles of the e2e tests.
type e2eConfig struct {
	// ValidationHTTP and ValidationTLS are the profile's validation ports:
	// where http-01 and tls-alpn-01 validation connect.
	ValidationHTTP, ValidationTLS int
	// ExtraProfiles are more acme_proxy directives for the proxy's site.
	ExtraProfiles string
	// ExtraSites are more site blocks.
	ExtraSites string
	// Admin, when set, is the admin endpoint's address; else it is off.
	Admin string
	// AppExtra is more of the global acme_proxy option's block (notify).
	AppExtra string
	// GlobalExtra is more of the global options block (servers).
	GlobalExtra string
	// NoAppOption leaves the global acme_proxy option out, as the
	// quickstart does: the handler pulls the app in, its database in
	// Caddy's data directory.
	NoAppOption bool
}

// e2eCaddyfile is the config of every e2e test: the proxy's profile served
// at https://127.0.0.1:<https port>/acme/e2e/, signed by Caddy's local CA,
// resolving through the test's DNS server. Caddy logs to a file, shown
// when a test fails (or always, with E2E_CADDY_LOG=1); not at level DEBUG,
// which in Caddy v2.11.9 makes the events app copy the TLS app's struct
// (caddyevents.App.Emit → TLS.CaddyModule, a value receiver) from
// certmagic's goroutines while TLS.Start still writes it: a data race
// that -race reports now and then.
var e2eCaddyfile = template.Must(template.New("Caddyfile").Parse(`{
	{{if .Cfg.Admin}}admin {{.Cfg.Admin}}{{else}}admin off{{end}}
	persist_config off
	log {
		output file {{.Env.LogFile}}
	}
	storage file_system {{.Env.Storage}}
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	local_certs
	default_bind 127.0.0.1
	http_port {{.Env.HTTPPort}}
	https_port {{.Env.HTTPSPort}}
	{{.Cfg.GlobalExtra}}
	{{if not .Cfg.NoAppOption}}acme_proxy {
		database {{.Env.Database}}
		{{.Cfg.AppExtra}}
	}{{end}}
}

https://127.0.0.1:{{.Env.HTTPSPort}} {
	acme_proxy {
		profile ` + e2eProfile + `
		resolvers {{.Env.DNSAddr}}
		validation_ports {
			http {{.Cfg.ValidationHTTP}}
			tls {{.Cfg.ValidationTLS}}
		}
	}
{{.Cfg.ExtraProfiles}}
}
{{.Cfg.ExtraSites}}
`))

// e2eEnv is one test's Caddy, DNS server and trust anchors.
type e2eEnv struct {
	Dir       string
	Storage   string
	Database  string
	HTTPPort  int
	HTTPSPort int
	DNSAddr   string
	LogFile   string // Caddy's log, shown when a test fails

	dns     *testdns.Server
	running bool // a config is loaded
	// rootFile is Caddy's local root, rootPool the pool holding it; set
	// once Caddy has created its local CA.
	rootFile string
	rootPool *x509.CertPool
	// client trusts rootPool.
	client *http.Client
}

// newE2EEnv isolates Caddy in a temporary directory, picks its ports and
// starts the DNS server. Caddy is not running yet: call load.
func newE2EEnv(t *testing.T) *e2eEnv {
	t.Helper()
	quietE2ELego(t)
	dir := isolate(t)
	env := &e2eEnv{
		Dir:       dir,
		Storage:   filepath.Join(dir, "storage"),
		Database:  filepath.Join(dir, "acme_proxy.db"),
		LogFile:   filepath.Join(dir, "caddy.log"),
		HTTPPort:  freePort(t),
		HTTPSPort: freePort(t),
		dns:       startE2EDNS(t),
		rootFile:  filepath.Join(dir, "storage", "pki", "authorities", "local", "root.crt"),
	}
	env.DNSAddr = env.dns.Addr
	// Registered before load registers caddy.Stop, so it runs after it.
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("E2E_CADDY_LOG") == "" {
			return
		}
		if log, err := os.ReadFile(env.LogFile); err == nil {
			t.Logf("Caddy's log:\n%s", log)
		}
	})
	return env
}

// createLocalCA has Caddy create its local CA now, by loading (and
// stopping) a config holding just the pki app, so that the root file
// exists before a config naming it as an ACME issuer's trusted root is
// provisioned: the issuer reads it at provision, and the apps of one
// config provision in no fixed order.
func (env *e2eEnv) createLocalCA(t *testing.T) {
	t.Helper()
	pki := fmt.Sprintf(`{
		"admin": {"disabled": true, "config": {"persist": false}},
		"logging": {"logs": {"default": {"writer": {"output": "file", "filename": %q}}}},
		"storage": {"module": "file_system", "root": %q},
		"apps": {"pki": {"certificate_authorities": {"local": {"install_trust": false}}}}
	}`, env.LogFile, env.Storage)
	if err := caddy.Load([]byte(pki), true); err != nil {
		t.Fatalf("caddy.Load of the pki app: %v", err)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatalf("caddy.Stop: %v", err)
	}
	env.trustLocalRoot(t)
}

// trustLocalRoot reads Caddy's local root and builds the client that
// trusts it.
func (env *e2eEnv) trustLocalRoot(t *testing.T) {
	t.Helper()
	if env.client != nil {
		return
	}
	pemBytes, err := os.ReadFile(env.rootFile)
	if err != nil {
		t.Fatalf("the pki app wrote no root: %v", err)
	}
	env.rootPool = x509.NewCertPool()
	if !env.rootPool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s holds no certificate", env.rootFile)
	}
	env.client = &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.rootPool}},
	}
	t.Cleanup(env.client.CloseIdleConnections)
}

// caddyfile renders the config for cfg.
func (env *e2eEnv) caddyfile(t *testing.T, cfg e2eConfig) string {
	t.Helper()
	var b bytes.Buffer
	if err := e2eCaddyfile.Execute(&b, struct {
		Env *e2eEnv
		Cfg e2eConfig
	}{env, cfg}); err != nil {
		t.Fatal(err)
	}
	return string(caddyfile.Format(b.Bytes()))
}

// load adapts and loads cfg: the first call starts Caddy (stopped when the
// test ends), later calls are config reloads.
func (env *e2eEnv) load(t *testing.T, cfg e2eConfig) {
	t.Helper()
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(env.caddyfile(t, cfg)), nil)
	if err != nil {
		t.Fatalf("adapt: %v\n%s", err, env.caddyfile(t, cfg))
	}
	for _, w := range warnings {
		t.Errorf("adapt warning: line %d: %s", w.Line, w.Message)
	}
	if !env.running {
		load(t, cfgJSON)
		env.running = true
	} else if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("caddy.Load (reload): %v", err)
	}
	env.trustLocalRoot(t)
	// Caddy obtains the proxy site's certificate in the background.
	if status, body := getEventually(t, env.client, env.directoryURL(e2eProfile)); status != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %s", env.directoryURL(e2eProfile), status, body)
	}
}

// directoryURL is the ACME directory of a profile served under its
// default prefix on the proxy's site.
func (env *e2eEnv) directoryURL(profile string) string {
	return fmt.Sprintf("https://127.0.0.1:%d/acme/%s/directory", env.HTTPSPort, profile)
}

// checkIssued checks an issued chain (leaf first, DER): the leaf chains to
// Caddy's local root through the rest of the chain, carries exactly the
// names wanted (DNS names and IP addresses, in any order) and passes
// zlint with the private-CA exceptions.
func (env *e2eEnv) checkIssued(t *testing.T, chain [][]byte, want ...string) *x509.Certificate {
	t.Helper()
	if len(chain) == 0 {
		t.Fatal("no certificate issued")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		t.Fatalf("parsing the leaf: %v", err)
	}
	inters := x509.NewCertPool()
	for i, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatalf("parsing chain[%d]: %v", i+1, err)
		}
		inters.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: env.rootPool, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Errorf("the leaf does not chain to Caddy's local root: %v", err)
	}
	got := slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		got = append(got, ip.String())
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("the leaf names %q, want exactly %q", got, want)
	}
	lintcheck.PrivateLeaf(t, chain[0])
	return leaf
}

// proxyIssued reports whether Caddy's log records the proxy issuing the
// certificate with this serial (event certificate_issued).
func (env *e2eEnv) proxyIssued(t *testing.T, serial *big.Int) bool {
	t.Helper()
	data, err := os.ReadFile(env.LogFile)
	if err != nil {
		t.Fatalf("reading Caddy's log: %v", err)
	}
	for line := range bytes.Lines(data) {
		var entry struct {
			Event  string `json:"event"`
			Serial string `json:"serial"`
		}
		if json.Unmarshal(line, &entry) != nil || entry.Event != "certificate_issued" {
			continue
		}
		if n, ok := new(big.Int).SetString(entry.Serial, 16); ok && n.Cmp(serial) == 0 {
			return true
		}
	}
	return false
}

// e2ePEMChain splits a PEM bundle into DER certificates.
func e2ePEMChain(t *testing.T, bundle []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			t.Fatalf("PEM block %q in a certificate chain", b.Type)
		}
		out = append(out, b.Bytes)
	}
	if len(bytes.TrimSpace(bundle)) > 0 {
		t.Fatalf("trailing data after the PEM chain: %q", bundle)
	}
	return out
}

// e2eListen opens a TCP listener on 127.0.0.1 on a free port, closed when
// the test ends.
func e2eListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func e2ePort(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// e2eHTTP01Server serves http-01 key authorizations on a listener for the
// whole test, for the clients that do not bring their own server.
type e2eHTTP01Server struct {
	mu    sync.Mutex
	keys  map[string]string   // token → key authorization
	holds map[string]*e2eHold // token → a gate its requests wait at
}

// e2eHold keeps the requests for one token waiting until released.
type e2eHold struct {
	arrived     chan struct{} // closed when the first request arrives
	arrivedOnce sync.Once
	release     chan struct{}
}

func serveE2EHTTP01(t *testing.T, ln net.Listener) *e2eHTTP01Server {
	t.Helper()
	s := &e2eHTTP01Server{keys: map[string]string{}, holds: map[string]*e2eHold{}}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return s
}

func (s *e2eHTTP01Server) set(token, keyAuth string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[token] = keyAuth
}

// holdBack makes the requests for token wait until release is called;
// arrived is closed when the first one arrives.
func (s *e2eHTTP01Server) holdBack(token string) (arrived <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &e2eHold{arrived: make(chan struct{}), release: make(chan struct{})}
	s.holds[token] = h
	var once sync.Once
	return h.arrived, func() { once.Do(func() { close(h.release) }) }
}

func (s *e2eHTTP01Server) delete(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, token)
}

func (s *e2eHTTP01Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, "/.well-known/acme-challenge/")
	s.mu.Lock()
	keyAuth, found := s.keys[token]
	h := s.holds[token]
	s.mu.Unlock()
	if h != nil {
		h.arrivedOnce.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(keyAuth))
}

// e2eLogHandler sends slog records to the test's output; quiet until a
// test fails or runs with -v.
func e2eLogHandler(t *testing.T, level slog.Level) slog.Handler {
	return slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level})
}
