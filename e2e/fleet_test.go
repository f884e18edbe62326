//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/letsencrypt/pebble/v2/ca"
	pebbledb "github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// The fleet: two built Caddy binaries, A on 127.0.0.1 and B on 127.0.0.2,
// each with its own data directory and Caddy storage, on one PostgreSQL
// database. Both serve https://ca.example.com:<port> (the same port on
// their own address, as two machines behind a TCP round-robin would), so
// a client's URLs are the same whichever instance it reaches; the
// client's transport picks the instance per request.
const (
	fleetZone = "example.com."
	fleetHost = "ca.example.com"
)

// fleetCaddyfile is one instance's configuration: %[1]s its address,
// %[2]d its admin port, %[3]s its storage, %[4]d/%[5]d the HTTPS/HTTP
// ports, %[6]s the DSN, %[7]s/%[8]s the site's certificate and key,
// %[9]s/%[10]s the local CA's, %[11]s the test DNS server, %[12]s the
// relay profile (or nothing).
const fleetCaddyfile = `{
	admin %[1]s:%[2]d
	persist_config off
	storage file_system %[3]s
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	auto_https disable_redirects
	default_bind %[1]s
	https_port %[4]d
	http_port %[5]d
	acme_proxy {
		database postgres "%[6]s"
	}
}

https://` + fleetHost + ` {
	tls %[7]s %[8]s
	acme_proxy {
		profile internal
		challenges dns-01
		resolvers %[11]s
		signer local_ca {
			cert %[9]s
			key  %[10]s
		}
	}
%[12]s}

http:// {
	acme_proxy_challenges
	respond "nothing here" 404
}
`

// fleetRelayProfile is the relay profile: Pebble, answered by http-01.
const fleetRelayProfile = `	acme_proxy {
		profile public
		challenges dns-01
		resolvers %[1]s
		signer relay {
			directory %[2]s
			trusted_roots %[3]s
			challenge http01
		}
	}
`

type fleet struct {
	bin            string
	dsn            string
	dns            *testdns.Server
	pebble         *fleetPebble
	port, httpPort int
	ca             *x509.Certificate
	caPool         *x509.CertPool
	siteCert, siteKey,
	caCert, caKey string
	inst [2]*fleetInstance
}

type fleetInstance struct {
	name      string // "A", "B"
	ip        string
	adminPort int
	storage   string
	relay     bool // mounts the relay profile
	proc      *caddyProc
}

// newFleet is a fleet on a PostgreSQL database of the test's own, with
// its test DNS server, its ACME and HTTP ports free on every one of ips,
// its CA and the Caddy binary built; no instance yet. dir is the test's
// directory, for the instances' storage.
func newFleet(t *testing.T, ips ...string) (f *fleet, dir string) {
	t.Helper()
	f = &fleet{dsn: pgtest.DSN(t)}
	dir = t.TempDir()
	d, err := testdns.Start(fleetZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	f.dns = d
	f.port, f.httpPort = freePortOn(t, ips...), freePortOn(t, ips...)
	f.makeCA(t, dir)
	f.bin = buildCaddy(t)
	return f, dir
}

func (f *fleet) config(in *fleetInstance) string {
	relay := ""
	if in.relay {
		relay = fmt.Sprintf(fleetRelayProfile, f.dns.Addr, f.pebble.dir, f.pebble.rootsFile)
	}
	return fmt.Sprintf(fleetCaddyfile, in.ip, in.adminPort, in.storage, f.port, f.httpPort, f.dsn,
		f.siteCert, f.siteKey, f.caCert, f.caKey, f.dns.Addr, relay)
}

// start runs the instance's binary and waits until it answers.
func (f *fleet) start(t *testing.T, in *fleetInstance) {
	t.Helper()
	if in.running() {
		return
	}
	home := filepath.Join(in.storage, "home")
	in.proc = startCaddy(t, f.bin, f.config(in), []string{"HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CONFIG_HOME=" + home})
	hc := f.pinned(in)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-in.proc.exited:
			t.Fatalf("caddy %s exited: %v", in.name, in.proc.err)
		default:
		}
		// The directory answers once the HTTP app runs, which may be
		// before the acme_proxy app has finished starting (recovering
		// its jobs from the database); Caddy logs this line once every
		// app has. A test that stops the database before it would kill
		// the start, as the README says a database away at start does.
		started := strings.Contains(in.proc.out.String(), "serving initial configuration")
		resp, err := hc.Get(f.directory("internal"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && started {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy %s did not answer its directory and finish starting within a minute: %v", in.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// running reports whether the instance's process is up.
func (in *fleetInstance) running() bool {
	if in.proc == nil {
		return false
	}
	select {
	case <-in.proc.exited:
		return false
	default:
		return true
	}
}

// kill ends the instance's process group with SIGKILL: no shutdown runs.
func (f *fleet) kill(t *testing.T, in *fleetInstance) {
	t.Helper()
	if err := syscall.Kill(-in.proc.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 caddy %s: %v", in.name, err)
	}
	<-in.proc.exited
}

// reload loads the instance's current configuration through its admin
// endpoint, as `caddy reload` does.
func (f *fleet) reload(t *testing.T, in *fleetInstance) {
	t.Helper()
	url := fmt.Sprintf("http://%s:%d/load", in.ip, in.adminPort)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(f.config(in)))
	req.Header.Set("Content-Type", "text/caddyfile")
	// Caddy's admin endpoint on a loopback address accepts these hosts.
	req.Host = fmt.Sprintf("localhost:%d", in.adminPort)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("reloading caddy %s: %v", in.name, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Errorf("reloading caddy %s: %s %s", in.name, resp.Status, body)
	}
}

func (f *fleet) directory(profile string) string {
	return fmt.Sprintf("https://%s:%d/acme/%s/directory", fleetHost, f.port, profile)
}

// transport reaches one instance, whatever the URL's host.
func (f *fleet) transport(in *fleetInstance) *http.Transport {
	addr := net.JoinHostPort(in.ip, fmt.Sprint(f.port))
	return &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: f.caPool, ServerName: fleetHost},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		},
		ResponseHeaderTimeout: 30 * time.Second,
	}
}

func (f *fleet) pinned(in *fleetInstance) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: f.transport(in)}
}

// alternating sends each request to the next instance in turn, or only to
// one when pinned.
type alternating struct {
	ts     [2]*http.Transport
	next   atomic.Int64
	pin    atomic.Int64 // 0: alternate; 1+i: only instance i
	served [2]atomic.Int64
	// finalized counts finalize requests each instance answered 200.
	finalized [2]atomic.Int64
	// resend: see resendingAfterReload.
	resend bool
	// trace, when set, records every exchange.
	trace *clientTrace
}

func (f *fleet) alternating() *alternating {
	a := &alternating{}
	for i, in := range f.inst {
		a.ts[i] = f.transport(in)
	}
	return a
}

// resendingAfterReload makes a resend, once, each request that died in
// transport before any answer (EOF, a reset). A server that closes a
// connection while a request is on its way (as a reloading Caddy does
// with the connections of its old configuration) leaves it to the client
// whether to send again (RFC 9112 §9.3.1). For ACME that is always safe:
// a resent JWS that the server did process carries a used nonce and is
// refused with badNonce, which the client answers by signing again with
// a fresh one. x/crypto/acme does not resend on its own, so the reload
// test's transport does: the test is about what the server keeps.
func (a *alternating) resendingAfterReload() *alternating {
	a.resend = true
	return a
}

func (a *alternating) RoundTrip(req *http.Request) (*http.Response, error) {
	i := int(a.next.Add(1) % 2)
	if p := a.pin.Load(); p > 0 {
		i = int(p - 1)
	}
	resp, err := a.ts[i].RoundTrip(req)
	if err != nil && a.resend && req.Context().Err() == nil && (req.Body == nil || req.GetBody != nil) {
		again := req.Clone(req.Context())
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, errors.Join(err, berr)
			}
			again.Body = body
		}
		resp, err = a.ts[i].RoundTrip(again)
	}
	if err == nil {
		a.served[i].Add(1)
		if strings.Contains(req.URL.Path, "/finalize") && resp.StatusCode == http.StatusOK {
			a.finalized[i].Add(1)
		}
	}
	if a.trace != nil {
		a.trace.note(i, req, resp, err)
	}
	return resp, err
}

// clientTrace records each exchange of a client, for a failure message:
// when (seconds since start), with which instance, the request, and the
// answer's status, its order status or problem, and its Retry-After.
type clientTrace struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func (ct *clientTrace) note(i int, req *http.Request, resp *http.Response, err error) {
	line := fmt.Sprintf("%7.2fs %s %s %s", time.Since(ct.start).Seconds(), string("AB"[i]), req.Method, req.URL.Path)
	if err != nil {
		line += fmt.Sprintf(": %v", err)
	} else {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var doc struct {
			Status json.RawMessage `json:"status"`
			Type   string          `json:"type"`
			Detail string          `json:"detail"`
		}
		_ = json.Unmarshal(body, &doc)
		line += fmt.Sprintf(": %d", resp.StatusCode)
		if doc.Type != "" {
			line += " " + doc.Type + " " + doc.Detail
		} else if len(doc.Status) > 0 {
			line += " " + string(doc.Status)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			line += " Retry-After " + ra
		}
	}
	ct.mu.Lock()
	ct.lines = append(ct.lines, line)
	ct.mu.Unlock()
}

// about returns the lines of the exchanges whose path contains sub.
func (ct *clientTrace) about(sub string) string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	var b strings.Builder
	for _, l := range ct.lines {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func (a *alternating) pinTo(i int) { a.pin.Store(int64(i + 1)) }

// client is an ACME client of profile, registered, over rt.
func (f *fleet) client(t *testing.T, rt http.RoundTripper, profile string) (*xacme.Client, *xacme.Account) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := &xacme.Client{Key: key, DirectoryURL: f.directory(profile), UserAgent: "fleet-test",
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: rt}}
	acct, err := c.Register(t.Context(), &xacme.Account{}, xacme.AcceptTOS)
	if err != nil {
		t.Fatalf("registering at %s: %v", profile, err)
	}
	return c, acct
}

// authorize places an order for names and proves them by dns-01 in the
// test DNS server; it returns the order, ready.
func (f *fleet) authorize(ctx context.Context, c *xacme.Client, names ...string) (*xacme.Order, error) {
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(names...))
	if err != nil {
		return nil, fmt.Errorf("new order: %w", err)
	}
	for _, u := range order.AuthzURLs {
		z, err := c.GetAuthorization(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("authorization: %w", err)
		}
		if z.Status == xacme.StatusValid {
			continue
		}
		var chal *xacme.Challenge
		for _, ch := range z.Challenges {
			if ch.Type == "dns-01" {
				chal = ch
			}
		}
		if chal == nil {
			return nil, fmt.Errorf("no dns-01 challenge for %s", z.Identifier.Value)
		}
		rec, err := c.DNS01ChallengeRecord(chal.Token)
		if err != nil {
			return nil, err
		}
		f.dns.AddTXT("_acme-challenge."+z.Identifier.Value+".", rec)
		if _, err := c.Accept(ctx, chal); err != nil {
			return nil, fmt.Errorf("accepting the challenge for %s: %w", z.Identifier.Value, err)
		}
		if _, err := c.WaitAuthorization(ctx, z.URI); err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", z.Identifier.Value, err)
		}
	}
	return c.WaitOrder(ctx, order.URI)
}

func csrFor(t testing.TB, names ...string) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: names[0]}, DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// issue obtains a certificate for names.
func (f *fleet) issue(ctx context.Context, t testing.TB, c *xacme.Client, names ...string) ([][]byte, error) {
	order, err := f.authorize(ctx, c, names...)
	if err != nil {
		return nil, err
	}
	der, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csrFor(t, names...), true)
	if err != nil {
		return nil, fmt.Errorf("finalize: %w", err)
	}
	return der, nil
}

// verifyChain checks that chain's leaf is for name and chains to roots.
func verifyChain(t *testing.T, chain [][]byte, roots *x509.CertPool, name string) *x509.Certificate {
	t.Helper()
	leaf, err := checkChain(chain, roots, name)
	if leaf == nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Error(err)
	}
	return leaf
}

// checkChain is verifyChain for a goroutine: it returns the leaf, if
// there is one, and what is wrong.
func checkChain(chain [][]byte, roots *x509.CertPool, name string) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("an empty chain for %s", name)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, fmt.Errorf("the certificate for %s: %w", name, err)
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter}); err != nil {
		return leaf, fmt.Errorf("the certificate for %s does not verify: %w", name, err)
	}
	return leaf, nil
}

// ---- the fleet's CA, site certificate and upstream ----

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// makeCA writes the CA both instances sign with (the same files on each
// machine, as the README's Several instances section asks) and a site
// certificate for fleetHost it signed.
func (f *fleet) makeCA(t *testing.T, dir string) {
	t.Helper()
	pki := makeTestPKI(t, dir, "fleet test CA", fleetHost, "site")
	f.ca, f.caCert, f.caKey, f.siteCert, f.siteKey = pki.ca, pki.caFile, pki.caKeyFile, pki.certFile, pki.keyFile
	f.caPool = x509.NewCertPool()
	f.caPool.AddCert(f.ca)
}

// testPKI is a CA of a test's own and a server certificate it signed,
// with the PEM files of each and their keys.
type testPKI struct {
	ca                *x509.Certificate
	caFile, caKeyFile string
	certFile, keyFile string
}

// makeTestPKI makes a CA named caName, able to sign certificates and
// CRLs (a local_ca signer's, an operator's private one), and a server
// certificate for host it signed, valid for a day; it writes them and
// their keys (PKCS #8) into dir, as ca.pem and ca.key, <server>.pem and
// <server>.key.
func makeTestPKI(t *testing.T, dir, caName, host, server string) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: caName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), caKeyFile: filepath.Join(dir, "ca.key"),
		certFile: filepath.Join(dir, server+".pem"), keyFile: filepath.Join(dir, server+".key")}
	p.ca, _ = x509.ParseCertificate(der)
	writePEM(t, p.caFile, "CERTIFICATE", der)
	k, _ := x509.MarshalPKCS8PrivateKey(caKey)
	writePEM(t, p.caKeyFile, "PRIVATE KEY", k)

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if der, err = x509.CreateCertificate(rand.Reader, leaf, p.ca, key.Public(), caKey); err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.certFile, "CERTIFICATE", der)
	k, _ = x509.MarshalPKCS8PrivateKey(key)
	writePEM(t, p.keyFile, "PRIVATE KEY", k)
	return p
}

// fleetPebble is an in-process Pebble behind a front that counts new
// orders (in all and per name), counts the finalizes it answered, and can
// slow finalize down, so that relays are in flight when a test needs them
// to be.
type fleetPebble struct {
	srv           *httptest.Server
	root          *x509.Certificate
	dir           string
	rootsFile     string
	newOrders     atomic.Int64
	finalized     atomic.Int64 // finalize requests answered
	finalizeDelay atomic.Int64 // nanoseconds
	mu            sync.Mutex
	ordersFor     map[string]int // new-order requests naming each identifier
}

// noteOrder counts a new-order request's identifiers, read from its JWS
// payload (RFC 8555 §7.4).
func (p *fleetPebble) noteOrder(body []byte) {
	var jws struct {
		Payload string `json:"payload"`
	}
	var order struct {
		Identifiers []struct {
			Value string `json:"value"`
		} `json:"identifiers"`
	}
	err := json.Unmarshal(body, &jws)
	if err == nil {
		var payload []byte
		if payload, err = base64.RawURLEncoding.DecodeString(jws.Payload); err == nil {
			err = json.Unmarshal(payload, &order)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.ordersFor["(unreadable)"]++
		return
	}
	for _, id := range order.Identifiers {
		p.ordersFor[id.Value]++
	}
}

// orders returns how many new-order requests named name.
func (p *fleetPebble) orders(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ordersFor[name]
}

func startFleetPebble(t *testing.T, dnsAddr string, httpPort int) *fleetPebble {
	t.Helper()
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	t.Setenv("PEBBLE_AUTHZREUSE", "0")
	t.Setenv("PEBBLE_VA_ALWAYS_VALID", "0")
	logger := log.New(io.Discard, "", 0)
	if os.Getenv("PEBBLE_LOG") != "" {
		logger = log.New(os.Stderr, "pebble ", log.Lmicroseconds)
	}
	st := pebbledb.NewMemoryStore()
	cai := ca.New(logger, st, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	vai := va.New(logger, httpPort, 1, false, dnsAddr, st)
	wfei := wfe.New(logger, st, vai, cai, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	p := &fleetPebble{ordersFor: map[string]int{}}
	h := wfei.Handler()
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/order-plz" {
			p.newOrders.Add(1)
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			p.noteOrder(body)
		}
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/finalize-order/") {
			time.Sleep(time.Duration(p.finalizeDelay.Load()))
			defer p.finalized.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	p.root = cai.GetRootCert(0).Cert
	p.dir = p.srv.URL + wfe.DirectoryPath
	p.rootsFile = filepath.Join(t.TempDir(), "pebble-tls.pem")
	writePEM(t, p.rootsFile, "CERTIFICATE", p.srv.Certificate().Raw)
	return p
}

// needLoopback2 skips (or fails under ACMEPROXY_E2E=1) where 127.0.0.2
// cannot be bound: B lives there.
func needLoopback2(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		needEnvironment(t, fmt.Sprintf("the fleet test puts its second instance on 127.0.0.2: %v", err))
	}
	ln.Close()
}

// freePortOn returns a port free on both addresses a moment ago.
func freePortOn(t *testing.T, ips ...string) int {
	t.Helper()
	for range 20 {
		p := freePort(t)
		ok := true
		for _, ip := range ips {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(p)))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

// TestTwoCaddyInstancesOnOnePostgreSQLServeEveryRequestAndFinishEveryRelay
// runs the fleet through what a fleet is for, in order: a client whose
// requests alternate between the instances; a relay placed through A whose
// upstream challenge B answers; B reloaded under load; A killed with
// relays in flight; PostgreSQL restarted under load.
func TestTwoCaddyInstancesOnOnePostgreSQLServeEveryRequestAndFinishEveryRelay(t *testing.T) {
	needLoopback2(t)
	f, dir := newFleet(t, "127.0.0.1", "127.0.0.2")
	f.pebble = startFleetPebble(t, f.dns.Addr, f.httpPort)
	f.inst[0] = &fleetInstance{name: "A", ip: "127.0.0.1", adminPort: freePortOn(t, "127.0.0.1"), storage: filepath.Join(dir, "a"), relay: true}
	// B mounts no relay signer at first: then only A can run a relay, and
	// B's answer to the upstream can only come from the database.
	f.inst[1] = &fleetInstance{name: "B", ip: "127.0.0.2", adminPort: freePortOn(t, "127.0.0.2"), storage: filepath.Join(dir, "b")}
	A, B := f.inst[0], f.inst[1]
	f.start(t, A)
	f.start(t, B)

	pebbleRoots := x509.NewCertPool()
	pebbleRoots.AddCert(f.pebble.root)

	t.Run("a client alternating between the instances issues, renews and revokes", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		rt := f.alternating()
		c, _ := f.client(t, rt, "internal")
		const name = "alt.example.com"
		first, err := f.issue(ctx, t, c, name)
		if err != nil {
			t.Fatalf("issue: %v", err)
		}
		leaf1 := verifyChain(t, first, f.caPool, name)
		renewed, err := f.issue(ctx, t, c, name)
		if err != nil {
			t.Fatalf("renew: %v", err)
		}
		leaf2 := verifyChain(t, renewed, f.caPool, name)
		if leaf1.SerialNumber.Cmp(leaf2.SerialNumber) == 0 {
			t.Error("the renewal returned the first certificate again")
		}
		if err := c.RevokeCert(ctx, nil, first[0], xacme.CRLReasonSuperseded); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		// Each instance's CRL lists it, whichever took the revocation.
		for _, in := range f.inst {
			f.waitListed(t, in, leaf1.SerialNumber)
		}
		for i, in := range f.inst {
			if n := rt.served[i].Load(); n < 5 {
				t.Errorf("caddy %s served %d requests; want about half of them", in.name, n)
			}
		}
	})

	t.Run("a relay placed through A has its upstream challenge answered by B", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		const name = "relay-b.example.com"
		// Pebble validates http-01 at the name's address: B's.
		f.dns.SetAddrs(name+".", netip.MustParseAddr(B.ip))
		rt := f.alternating()
		rt.pinTo(0)
		c, _ := f.client(t, rt, "public")
		chain, err := f.issue(ctx, t, c, name)
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
		verifyChain(t, chain, pebbleRoots, name)
		if got := f.pebble.orders(name); got != 1 {
			t.Errorf("the upstream saw %d orders for %s; want one", got, name)
		}
	})

	t.Run("a config reload of B during load loses nothing", func(t *testing.T) {
		const clients = 4
		l := f.load(t, clients, "reload")
		defer l.stop() // a Fatalf below stops the clients too
		waitFor := func(what string, n int, counts func(issuance) bool) {
			deadline := time.Now().Add(2 * time.Minute)
			for l.count(counts) < n {
				if time.Now().After(deadline) {
					t.Fatalf("%s: fewer than %d within two minutes (%s)", what, n, l)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		waitFor("issuances before the reload", clients, func(is issuance) bool { return is.err == nil })
		// Mid-load, B is reloaded: it now mounts the relay profile too.
		B.relay = true
		reloading := time.Now()
		f.reload(t, B)
		reloaded := time.Now()
		// The clients go on until a few orders begun after the reload
		// returned were issued with requests that B answered.
		waitFor("issuances through B begun after the reload", clients, func(is issuance) bool {
			return is.err == nil && is.viaB > 0 && is.start.After(reloaded)
		})
		all := l.stop()
		var before, during, after int
		for _, is := range all {
			switch {
			case is.err != nil:
				t.Errorf("%s (%.2fs to %.2fs after the clients started): %v", is.name,
					is.start.Sub(l.began).Seconds(), is.end.Sub(l.began).Seconds(), is.err)
			case is.end.Before(reloading):
				before++
			case is.start.After(reloaded):
				after++
			default:
				during++
			}
		}
		t.Logf("the reload took %s; issued before it %d, in flight during it %d, begun after it %d",
			reloaded.Sub(reloading).Round(time.Millisecond), before, during, after)
		// Each client issues one order after another: an order of each was
		// in flight when the reload began, unless it was between two.
		if during == 0 {
			t.Errorf("no order was in flight while B reloaded (%s); the reload must overlap the load", l)
		}
		if started := l.started.Load(); int64(len(all)) != started {
			t.Errorf("%d orders were begun and %d finished; every one must finish", started, len(all))
		}
		resp, err := f.pinned(B).Get(f.directory("public"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("B's relay profile after the reload: %v %v", resp, err)
		}
		resp.Body.Close()
	})

	t.Run("kill -9 of A while relays are in flight: B finishes every one, each placed upstream once", func(t *testing.T) {
		const n = 4
		rt := f.alternating()
		rt.pinTo(0)
		c, _ := f.client(t, rt, "public")
		before, finalizedBefore := f.pebble.newOrders.Load(), f.pebble.finalized.Load()
		// Slow upstream finalizes keep the relays in flight: slower than
		// the 3 s a finalize waits for its relay (README, Relay signer),
		// so that A answers every finalize processing, and its relays
		// are still waiting on the upstream when it dies.
		f.pebble.finalizeDelay.Store(int64(8 * time.Second))
		defer f.pebble.finalizeDelay.Store(0)
		rt.trace = &clientTrace{start: time.Now()}
		type result struct {
			name  string
			order string // its URL, once placed
			chain [][]byte
			err   error
			at    time.Time // when the client was done
		}
		results := make(chan result, n)
		for i := range n {
			name := fmt.Sprintf("crash-%d.example.com", i)
			f.dns.SetAddrs(name+".", netip.MustParseAddr(B.ip))
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
				defer cancel()
				order, err := f.authorize(ctx, c, name)
				if err != nil {
					results <- result{name: name, err: err, at: time.Now()}
					return
				}
				chain, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csrFor(t, name), true)
				if err != nil {
					// The poll was cut by the kill: ask B.
					var o *xacme.Order
					if o, err = c.WaitOrder(ctx, order.URI); err == nil {
						chain, err = c.FetchCert(ctx, o.CertURL, true)
					}
				}
				results <- result{name, order.URI, chain, err, time.Now()}
			}()
		}
		// Every order finalized at A (answered processing) and the first
		// upstream order placed: then A dies.
		deadline := time.Now().Add(time.Minute)
		for rt.finalized[0].Load() < n || f.pebble.newOrders.Load() == before {
			if time.Now().After(deadline) {
				t.Fatalf("A finalized %d of %d orders and placed %d upstream within a minute",
					rt.finalized[0].Load(), n, f.pebble.newOrders.Load()-before)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rt.pinTo(1)
		f.kill(t, A)
		killed := time.Now()
		// A relay is finished only after its upstream finalize is
		// answered: with fewer answered now, A died with relays of its
		// own unfinished, which only B can finish.
		upstreamFinalized := f.pebble.finalized.Load() - finalizedBefore
		t.Logf("killed A %.2fs after the clients started, with %d upstream orders placed and %d finalized",
			killed.Sub(rt.trace.start).Seconds(), f.pebble.newOrders.Load()-before, upstreamFinalized)
		if upstreamFinalized >= n {
			t.Fatalf("every upstream finalize (%d) was answered before A died: no relay was in flight", upstreamFinalized)
		}
		// B takes A's relays over once their lease (a minute) lapses,
		// and each client is to hear of its certificate within moments
		// of that: a second minute is slack for a loaded machine.
		const within = 2 * time.Minute
		for range n {
			r := <-results
			answered := ""
			if r.order != "" {
				answered = "; what its client was answered (seconds since the clients started):\n" + rt.trace.about(path.Base(r.order))
			}
			if r.err != nil {
				t.Errorf("%s: %v%s", r.name, r.err, answered)
				continue
			}
			if took := r.at.Sub(killed); took > within {
				t.Errorf("%s was issued %s after A died; want within %s%s", r.name, took.Round(time.Second), within, answered)
			}
			verifyChain(t, r.chain, pebbleRoots, r.name)
			if got := f.pebble.orders(r.name); got != 1 {
				t.Errorf("the upstream saw %d orders for %s; want it placed once", got, r.name)
			}
		}
		if got := f.pebble.newOrders.Load() - before; got != n {
			t.Errorf("the upstream saw %d new orders for %d relays; want each placed once", got, n)
		}
	})

	t.Run("a PostgreSQL restart mid-load fails requests with a 5xx problem, and the instances recover", func(t *testing.T) {
		f.start(t, A) // back after the kill, on the same database
		rt := f.alternating()
		c, acct := f.client(t, rt, "internal")
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		order, err := f.authorize(ctx, c, "pg.example.com")
		if err != nil {
			t.Fatal(err)
		}
		key := c.Key
		// Two loops per instance, each counted on its own instance's
		// side, so that one instance's answers cannot stand in for the
		// other's.
		var (
			stop       atomic.Bool
			ok, failed [2]atomic.Int64
			other      atomic.Int64
			mu         sync.Mutex
			odd        []string
			statuses   = map[string]int{}
			wg         sync.WaitGroup
		)
		loadCtx, cancelLoad := context.WithCancel(context.Background())
		halt := func() { stop.Store(true); cancelLoad(); wg.Wait() }
		defer halt() // a Fatalf below stops the loops too
		// Issuing clients too, so that requests that write (new-order,
		// the challenge, finalize) are in flight when PostgreSQL stops:
		// each 5xx they are answered is held to the same rule.
		checked := &outageChecker{next: f.alternating(), until: loadCtx}
		for i := range 2 {
			ic, _ := f.client(t, checked, "internal")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; !stop.Load(); j++ {
					ctx, cancel := context.WithTimeout(loadCtx, 30*time.Second)
					_, _ = f.issue(ctx, t, ic, fmt.Sprintf("pg-load-%d-%d.example.com", i, j))
					cancel()
				}
			}()
		}
		for i := range 4 {
			n := i % 2
			in := f.inst[n]
			hc := &http.Client{Timeout: 20 * time.Second, Transport: f.transport(in)}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					a, err := postAsGet(hc, key, acct.URI, f.newNonceURL("internal"), order.URI)
					if err == nil && a.status == http.StatusOK {
						ok[n].Add(1)
						continue
					}
					perr := err
					if perr == nil {
						perr = outageProblem(a)
					}
					mu.Lock()
					if perr == nil {
						failed[n].Add(1)
						statuses[fmt.Sprintf("%s %d", in.name, a.status)]++
					} else if other.Add(1) <= 10 {
						odd = append(odd, fmt.Sprintf("%s: %v", in.name, perr))
					}
					mu.Unlock()
				}
			}()
		}
		counts := func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("ok A %d B %d, 5xx problems A %d B %d, other %d %v",
				ok[0].Load(), ok[1].Load(), failed[0].Load(), failed[1].Load(), other.Load(), odd)
		}
		waitFor := func(what string, cond func() bool) {
			deadline := time.Now().Add(time.Minute)
			for !cond() {
				if time.Now().After(deadline) {
					t.Fatalf("%s: not within a minute (%s)", what, counts())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		each := func(c *[2]atomic.Int64, at [2]int64, n int64) func() bool {
			return func() bool { return c[0].Load() >= at[0]+n && c[1].Load() >= at[1]+n }
		}
		waitFor("answers before the restart", each(&ok, [2]int64{}, 4))
		pgtest.Stop(t)
		waitFor("5xx problems from each instance while PostgreSQL is down", each(&failed, [2]int64{}, 4))
		pgtest.Start(t)
		back := [2]int64{ok[0].Load(), ok[1].Load()}
		waitFor("answers again from each instance once PostgreSQL is back", each(&ok, back, 4))
		halt()
		t.Logf("the failures: %v; the issuing clients' 5xx answers: %d", statuses, checked.problems.Load())
		if other.Load() > 0 {
			t.Errorf("answers neither 200 nor the problem document the README promises (a hang shows as a timeout; the first 10 shown): %s", counts())
		}
		if bad := checked.wrong(); len(bad) > 0 {
			t.Errorf("the issuing clients were answered otherwise than 2xx-4xx or the problem document the README promises (the first 10 shown): %v", bad)
		}
		// Recovered means every request is answered again, not some: a
		// pooled connection the restart left dead must not fail one.
		for _, in := range f.inst {
			hc := &http.Client{Timeout: 20 * time.Second, Transport: f.transport(in)}
			for range 10 {
				a, err := postAsGet(hc, key, acct.URI, f.newNonceURL("internal"), order.URI)
				if err != nil || a.status != http.StatusOK {
					t.Errorf("caddy %s after the restart: %d %s %v", in.name, a.status, a.body, err)
				}
			}
		}
		// Both instances issue again, with no restart of their own.
		if _, err := f.issue(ctx, t, c, "after-pg.example.com"); err != nil {
			t.Errorf("issuing after the restart: %v", err)
		}
	})
}

// waitListed waits until the CRL that in serves for the internal profile
// lists serial, signed by the fleet's CA (regenerating the CRL is a job).
func (f *fleet) waitListed(t *testing.T, in *fleetInstance, serial *big.Int) {
	t.Helper()
	hc := f.pinned(in)
	url := fmt.Sprintf("https://%s:%d/acme/internal/crl", fleetHost, f.port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		listed, err := func() (bool, error) {
			resp, err := hc.Get(url)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			der, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			crl, err := x509.ParseRevocationList(der)
			if err != nil {
				return false, err
			}
			if err := crl.CheckSignatureFrom(f.ca); err != nil {
				return false, err
			}
			for _, e := range crl.RevokedCertificateEntries {
				if e.SerialNumber.Cmp(serial) == 0 {
					return true, nil
				}
			}
			return false, nil
		}()
		if listed {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the CRL caddy %s serves does not list serial %x within 30s (%v)", in.name, serial, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *fleet) newNonceURL(profile string) string {
	return fmt.Sprintf("https://%s:%d/acme/%s/new-nonce", fleetHost, f.port, profile)
}

// answer is what an instance answered one request.
type answer struct {
	req    string // "GET new-nonce", "POST order"
	status int
	header http.Header
	body   string
}

func (a answer) String() string {
	return fmt.Sprintf("%s: %d Content-Type %q Retry-After %q %q", a.req, a.status,
		a.header.Get("Content-Type"), a.header.Get("Retry-After"), a.body)
}

// postAsGet sends a POST-as-GET of url (RFC 8555 §6.3) signed by the
// account, with a nonce fetched from the same instance first, and returns
// the answer: the POST's, or the new-nonce request's if that gave no
// nonce.
func postAsGet(hc *http.Client, key crypto.Signer, kid, nonceURL, url string) (answer, error) {
	resp, err := hc.Get(nonceURL)
	if err != nil {
		return answer{}, fmt.Errorf("GET new-nonce: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	nonce := resp.Header.Get("Replay-Nonce")
	if nonce == "" {
		return answer{"GET new-nonce", resp.StatusCode, resp.Header, string(body)}, nil
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, &jose.SignerOptions{
		ExtraHeaders: map[jose.HeaderKey]any{"nonce": nonce, "url": url, "kid": kid}})
	if err != nil {
		return answer{}, err
	}
	jws, err := signer.Sign([]byte{})
	if err != nil {
		return answer{}, err
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(jws.FullSerialize()))
	req.Header.Set("Content-Type", "application/jose+json")
	resp, err = hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return answer{"POST " + url, resp.StatusCode, resp.Header, string(body)}, nil
}

// outageChecker passes requests on and holds each 5xx answer to
// outageProblem; a request that fails in transport before until is done
// counts against it too (the server is up: only a hang or a dropped
// connection would fail so).
type outageChecker struct {
	next     http.RoundTripper
	until    context.Context
	problems atomic.Int64
	mu       sync.Mutex
	bad      []string
}

func (c *outageChecker) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	var wrong error
	switch {
	case err != nil:
		if c.until.Err() == nil {
			wrong = fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
		}
	case resp.StatusCode >= 500:
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if wrong = rerr; wrong == nil {
			wrong = outageProblem(answer{req.Method + " " + req.URL.Path, resp.StatusCode, resp.Header, string(body)})
		}
		if wrong == nil {
			c.problems.Add(1)
		}
	}
	if wrong != nil {
		c.mu.Lock()
		if len(c.bad) < 10 {
			c.bad = append(c.bad, wrong.Error())
		}
		c.mu.Unlock()
	}
	return resp, err
}

func (c *outageChecker) wrong() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// outageProblem says what is wrong with a, answered while PostgreSQL was
// away, against the README's Several instances section: a problem
// document (RFC 7807, RFC 8555 §6.7) of type serverInternal whose status
// is the answer's, 500 or 503; a 503 asks the client to come back with
// Retry-After: 30.
func outageProblem(a answer) error {
	if a.status != http.StatusInternalServerError && a.status != http.StatusServiceUnavailable {
		return fmt.Errorf("status %d, want 500 or 503: %v", a.status, a)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		return fmt.Errorf("content type %q, want application/problem+json: %v", ct, a)
	}
	var p struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal([]byte(a.body), &p); err != nil {
		return fmt.Errorf("not a problem document (%w): %v", err, a)
	}
	if p.Type != "urn:ietf:params:acme:error:serverInternal" || p.Status != a.status || p.Detail == "" {
		return fmt.Errorf("problem %+v, want type serverInternal, a detail and status %d: %v", p, a.status, a)
	}
	if ra := a.header.Get("Retry-After"); a.status == http.StatusServiceUnavailable && ra != "30" {
		return fmt.Errorf("a 503 with Retry-After %q, want 30: %v", ra, a)
	}
	return nil
}

// issuing is a load of orders of the internal profile: several clients,
// each issuing one order after another, its requests alternating between
// the instances, until stop. It lasts as long as the test needs it to, so
// that what is to happen under load cannot find it over.
type issuing struct {
	began   time.Time
	halt    atomic.Bool
	wg      sync.WaitGroup
	started atomic.Int64 // orders begun

	mu   sync.Mutex
	done []issuance // orders finished, issued or not
}

// issuance is one order of the load, from its new-order to its
// certificate, checked: for the internal profile's name, from the fleet's
// CA.
type issuance struct {
	name       string
	start, end time.Time
	viaB       int64 // requests of the order that B answered
	err        error
}

// load starts clients issuing orders for names starting with prefix.
func (f *fleet) load(t *testing.T, clients int, prefix string) *issuing {
	l := &issuing{began: time.Now()}
	for i := range clients {
		rt := f.alternating().resendingAfterReload()
		c, _ := f.client(t, rt, "internal")
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for j := 0; !l.halt.Load(); j++ {
				is := issuance{name: fmt.Sprintf("%s-%d-%d.example.com", prefix, i, j), start: time.Now()}
				l.started.Add(1)
				viaB := rt.served[1].Load()
				// Not stop's to cut: an order begun is seen to its end.
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				chain, err := f.issue(ctx, t, c, is.name)
				cancel()
				if err == nil {
					_, err = checkChain(chain, f.caPool, is.name)
				}
				is.end, is.viaB, is.err = time.Now(), rt.served[1].Load()-viaB, err
				l.mu.Lock()
				l.done = append(l.done, is)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// count is how many of the finished orders counts counts.
func (l *issuing) count(counts func(issuance) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, is := range l.done {
		if counts(is) {
			n++
		}
	}
	return n
}

// stop has each client finish the order it is issuing, then issue no
// more; it returns every order finished.
func (l *issuing) stop() []issuance {
	l.halt.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.done)
}

func (l *issuing) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var failed []string
	for _, is := range l.done {
		if is.err != nil && len(failed) < 5 {
			failed = append(failed, fmt.Sprintf("%s: %v", is.name, is.err))
		}
	}
	return fmt.Sprintf("%d orders begun, %d finished, failed (the first 5): %v", l.started.Load(), len(l.done), failed)
}
