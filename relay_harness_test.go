package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	legoacme "github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/challenge/dns01"
	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"
	"github.com/letsencrypt/pebble/v2/ca"
	pebbledb "github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/libdns/libdns"
)

// ---- a DNS server the test runs ----

// relayZone is the zone every test name lives in; the server is its
// authority and answers every name in it with 127.0.0.1.
const relayZone = "example.com."

// startRelayDNS starts the test DNS server for relayZone, which Pebble's
// validation authority, certmagic and the proxy's validator all ask; it
// stops when the test ends.
func startRelayDNS(t *testing.T) *testdns.Server {
	t.Helper()
	d, err := testdns.Start(relayZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// ---- dns.providers.acmeproxytest: a libdns provider writing into it ----

// relayDNSServers maps the name a test gives its DNS server to the server,
// so the provider module Caddy builds from JSON can find it.
var relayDNSServers sync.Map

// relayDNSProvider is the Caddy module dns.providers.acmeproxytest, loaded
// through the relay's `dns <provider>` like any DNS plugin.
type relayDNSProvider struct {
	Server string `json:"server,omitempty"`
}

func (relayDNSProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "dns.providers.acmeproxytest", New: func() caddy.Module { return new(relayDNSProvider) }}
}

func init() { caddy.RegisterModule(relayDNSProvider{}) }

// UnmarshalCaddyfile reads `acmeproxytest <server>`.
func (p *relayDNSProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if !d.NextArg() {
		return d.ArgErr()
	}
	p.Server = d.Val()
	return nil
}

func (p *relayDNSProvider) server() (*testdns.Server, error) {
	v, ok := relayDNSServers.Load(p.Server)
	if !ok {
		return nil, fmt.Errorf("no test DNS server %q", p.Server)
	}
	return v.(*testdns.Server), nil
}

func (p *relayDNSProvider) AppendRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	srv, err := p.server()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		rr := r.RR()
		srv.AddTXT(libdns.AbsoluteName(rr.Name, zone), rr.Data)
	}
	return recs, nil
}

func (p *relayDNSProvider) DeleteRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	srv, err := p.server()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		rr := r.RR()
		srv.DeleteTXT(libdns.AbsoluteName(rr.Name, zone), rr.Data)
	}
	return recs, nil
}

var (
	_ libdns.RecordAppender = (*relayDNSProvider)(nil)
	_ libdns.RecordDeleter  = (*relayDNSProvider)(nil)
)

// ---- Pebble, in process, behind a counting and failing front ----

// relayPebble is an in-process Pebble whose every request passes a front
// that counts them by kind and can make Pebble unreachable.
type relayPebble struct {
	srv       *httptest.Server
	store     *pebbledb.MemoryStore
	root      *x509.Certificate
	altRoots  []*x509.Certificate // the roots of its alternate chains
	dir       string              // directory URL
	rootsFile string              // PEM of the TLS certificate, for trusted_roots
	down      atomic.Bool
	// gateway, while set, answers every request as a gateway in front
	// of Pebble whose backend is away: a 502 page quoting the request.
	gateway atomic.Bool

	mu     sync.Mutex
	counts map[string]int
	// orderProfiles are the "profile" members of the newOrder payloads
	// Pebble received, in order ("" for none); orderReplaces their
	// "replaces".
	orderProfiles []string
	orderReplaces []string
	// noARI hides renewalInfo from Pebble's directory: an upstream
	// without renewal information.
	noARI atomic.Bool
	// held, while set, holds each newOrder without an answer
	// until its request is cancelled (holdNewOrders).
	held atomic.Pointer[heldNewOrders]
	// refusal, while set, answers the next requests of its kind in
	// Pebble's stead (refuseNext).
	refusal atomic.Pointer[frontRefusal]
	// revocations are when Pebble's front received each revoke-cert
	// POST, whatever it answered; refused, when it refused one in
	// Pebble's stead.
	revocations []time.Time
	refused     []time.Time
}

// frontRefusal is an answer the front gives, in Pebble's stead, to the
// next left requests of kind: HTTP status with a problem document of
// type and detail, and subproblems when set, and a Retry-After of
// retryAfter unless "".
type frontRefusal struct {
	kind, typ, detail, retryAfter string
	status                        int
	subproblems                   []frontSubproblem
	left                          atomic.Int32
}

// frontSubproblem is a subproblem (RFC 8555 §6.7.1) of a front's
// refusal: a problem of type typ and detail about the DNS name name.
type frontSubproblem struct{ typ, name, detail string }

// refuseNext makes the front answer the next n POSTs of kind (a request
// kind it counts) with status, a problem of type typ, and retryAfter as
// the answer's Retry-After (none when "").
func (p *relayPebble) refuseNext(kind string, n int, status int, typ, retryAfter string) {
	p.refuseNextSaying(kind, n, status, typ, "refused by the test's front", retryAfter)
}

// refuseNextSaying is refuseNext with the problem's detail.
func (p *relayPebble) refuseNextSaying(kind string, n int, status int, typ, detail, retryAfter string) {
	r := &frontRefusal{kind: kind, typ: typ, detail: detail, retryAfter: retryAfter, status: status}
	r.left.Store(int32(n))
	p.refusal.Store(r)
}

// refuseNextWithSubproblems is refuseNextSaying with subproblems, and
// no Retry-After.
func (p *relayPebble) refuseNextWithSubproblems(kind string, n int, status int, typ, detail string, subs ...frontSubproblem) {
	r := &frontRefusal{kind: kind, typ: typ, detail: detail, status: status, subproblems: subs}
	r.left.Store(int32(n))
	p.refusal.Store(r)
}

// revocationTimes are when the front received each revoke-cert POST,
// and when it refused one in Pebble's stead.
func (p *relayPebble) revocationTimes() (received, refused []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.revocations), slices.Clone(p.refused)
}

// heldNewOrders tells a test about the newOrders Pebble's front holds.
type heldNewOrders struct {
	arrived   chan struct{} // one send per newOrder held
	cancelled chan struct{} // one send per held newOrder cancelled
	released  chan struct{} // closed when the test ends
}

// holdNewOrders makes the front hold every newOrder from now on, never
// answering it, until its client gives up on it or the test ends.
func (p *relayPebble) holdNewOrders(t *testing.T) *heldNewOrders {
	h := &heldNewOrders{arrived: make(chan struct{}, 16), cancelled: make(chan struct{}, 16), released: make(chan struct{})}
	p.held.Store(h)
	t.Cleanup(func() { close(h.released) })
	return h
}

// startRelayPebble runs Pebble validating http-01 on httpPort and dns-01
// through dnsAddr; alwaysValid makes it accept every challenge untried.
func startRelayPebble(t *testing.T, dnsAddr string, httpPort int, alwaysValid bool) *relayPebble {
	t.Helper()
	return startRelayPebbleWithProfiles(t, dnsAddr, httpPort, alwaysValid, map[string]ca.Profile{"default": {Description: "default"}})
}

// startRelayPebbleWithProfiles is startRelayPebble offering the given
// certificate profiles (an order that names none gets one at random).
func startRelayPebbleWithProfiles(t *testing.T, dnsAddr string, httpPort int, alwaysValid bool, profiles map[string]ca.Profile) *relayPebble {
	t.Helper()
	return startRelayPebbleOf(t, dnsAddr, httpPort, alwaysValid, profiles, 0)
}

// startRelayPebbleWithAlternates is startRelayPebble whose certificates
// come with alternates more chains, each to a root of its own (altRoots),
// as a CA with a cross-signed intermediate offers.
func startRelayPebbleWithAlternates(t *testing.T, dnsAddr string, httpPort int, alwaysValid bool, alternates int) *relayPebble {
	t.Helper()
	return startRelayPebbleOf(t, dnsAddr, httpPort, alwaysValid, map[string]ca.Profile{"default": {Description: "default"}}, alternates)
}

func startRelayPebbleOf(t *testing.T, dnsAddr string, httpPort int, alwaysValid bool, profiles map[string]ca.Profile, alternates int) *relayPebble {
	t.Helper()
	// Pebble reads these in va.New and wfe.New.
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	t.Setenv("PEBBLE_AUTHZREUSE", "0")
	if alwaysValid {
		t.Setenv("PEBBLE_VA_ALWAYS_VALID", "1")
	} else {
		t.Setenv("PEBBLE_VA_ALWAYS_VALID", "0")
	}
	logger := log.New(io.Discard, "", 0)
	if os.Getenv("PEBBLE_LOG") != "" {
		logger = log.New(os.Stderr, "pebble ", log.Lmicroseconds)
	}
	p := &relayPebble{store: pebbledb.NewMemoryStore(), counts: map[string]int{}}
	cai := ca.New(logger, p.store, "", "ecdsa", alternates, 1, profiles)
	vai := va.New(logger, httpPort, 1, false, dnsAddr, p.store)
	wfei := wfe.New(logger, p.store, vai, cai, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	p.srv = httptest.NewTLSServer(p.front(wfei.Handler()))
	t.Cleanup(p.srv.Close)
	p.root = cai.GetRootCert(0).Cert
	for i := range alternates {
		p.altRoots = append(p.altRoots, cai.GetRootCert(i+1).Cert)
	}
	p.dir = p.srv.URL + wfe.DirectoryPath
	p.rootsFile = filepath.Join(t.TempDir(), "pebble-tls.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	if err := os.WriteFile(p.rootsFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Request kinds the front counts, by Pebble's paths.
const (
	pebbleNewAccount = "new-account"
	pebbleNewOrder   = "new-order"
	pebbleFinalize   = "finalize"
	pebbleRevoke     = "revoke-cert"
)

func (p *relayPebble) front(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			// Unreachable: the connection dies without an answer.
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		if p.gateway.Load() {
			http.Error(w, "<html><h1>502 Bad Gateway</h1>no backend for "+r.URL.RequestURI()+"</html>", http.StatusBadGateway)
			return
		}
		kind := ""
		switch {
		case r.URL.Path == "/sign-me-up":
			kind = pebbleNewAccount
		case r.URL.Path == "/order-plz":
			kind = pebbleNewOrder
		case strings.HasPrefix(r.URL.Path, "/finalize-order/"):
			kind = pebbleFinalize
		case r.URL.Path == "/revoke-cert":
			kind = pebbleRevoke
		}
		if kind != "" && r.Method == http.MethodPost {
			p.mu.Lock()
			p.counts[kind]++
			if kind == pebbleRevoke {
				p.revocations = append(p.revocations, time.Now())
			}
			p.mu.Unlock()
		}
		if f := p.refusal.Load(); f != nil && kind == f.kind && r.Method == http.MethodPost && f.left.Add(-1) >= 0 {
			p.mu.Lock()
			p.refused = append(p.refused, time.Now())
			p.mu.Unlock()
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(f.status)
			doc := map[string]any{"type": f.typ, "detail": f.detail, "status": f.status}
			if len(f.subproblems) > 0 {
				var subs []map[string]any
				for _, sp := range f.subproblems {
					subs = append(subs, map[string]any{"type": sp.typ, "detail": sp.detail, "identifier": map[string]string{"type": "dns", "value": sp.name}})
				}
				doc["subproblems"] = subs
			}
			_ = json.NewEncoder(w).Encode(doc)
			return
		}
		if h := p.held.Load(); h != nil && kind == pebbleNewOrder && r.Method == http.MethodPost {
			// Read to its end: only then does the server notice a
			// client that gives up and closes the connection.
			_, _ = io.Copy(io.Discard, r.Body)
			h.arrived <- struct{}{}
			select {
			case <-r.Context().Done():
				h.cancelled <- struct{}{}
			case <-h.released:
				http.Error(w, "the test is over", http.StatusServiceUnavailable)
			}
			return
		}
		if kind == pebbleNewOrder && r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var jws struct {
				Payload string `json:"payload"`
			}
			var order struct {
				Profile  string `json:"profile"`
				Replaces string `json:"replaces"`
			}
			if json.Unmarshal(body, &jws) == nil {
				if payload, err := base64.RawURLEncoding.DecodeString(jws.Payload); err == nil {
					_ = json.Unmarshal(payload, &order)
				}
			}
			p.mu.Lock()
			p.orderProfiles = append(p.orderProfiles, order.Profile)
			p.orderReplaces = append(p.orderReplaces, order.Replaces)
			p.mu.Unlock()
		}
		if r.URL.Path == wfe.DirectoryPath && p.noARI.Load() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			var dir map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &dir); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			delete(dir, "renewalInfo")
			maps.Copy(w.Header(), rec.Header())
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_ = json.NewEncoder(w).Encode(dir)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// newOrderReplaces are the "replaces" of the newOrders Pebble received.
func (p *relayPebble) newOrderReplaces() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.orderReplaces)
}

// newOrderProfiles are the profiles the newOrders Pebble received asked for.
func (p *relayPebble) newOrderProfiles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.orderProfiles)
}

func (p *relayPebble) count(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[kind]
}

// roots is a pool of the Pebble TLS certificate.
func (p *relayPebble) tlsRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.srv.Certificate())
	return pool
}

// checkChainEndsAtRoot verifies that the PEM chain's leaf chains, through
// the chain's other certificates, to Pebble's root, and returns the leaf.
func (p *relayPebble) checkChainEndsAtRoot(t *testing.T, chainPEM []byte, name string) *x509.Certificate {
	t.Helper()
	return checkChainEndsAt(t, chainPEM, name, p.root)
}

// checkChainEndsAt verifies that the PEM chain's leaf chains, through the
// chain's other certificates, to root, and returns the leaf.
func checkChainEndsAt(t *testing.T, chainPEM []byte, name string, root *x509.Certificate) *x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for rest := chainPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		t.Fatal("the chain holds no certificate")
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name}); err != nil {
		t.Fatalf("the issued chain does not end at Pebble's root %q: %v", root.Subject, err)
	}
	if last := certs[len(certs)-1]; last.CheckSignatureFrom(root) != nil {
		t.Errorf("the chain's last certificate %q is not issued by Pebble's root %q", last.Subject, root.Subject)
	}
	return certs[0]
}

// ---- lego as the proxy's client ----

type relayLegoUser struct {
	key crypto.Signer
	reg *legoacme.ExtendedAccount
}

func (u *relayLegoUser) GetEmail() string                           { return "client@example.com" }
func (u *relayLegoUser) GetRegistration() *legoacme.ExtendedAccount { return u.reg }
func (u *relayLegoUser) GetPrivateKey() crypto.Signer               { return u.key }

// relayLegoDNS proves names to the proxy by dns-01, writing into the test DNS.
type relayLegoDNS struct{ d *testdns.Server }

func (p relayLegoDNS) Present(ctx context.Context, domain, _, keyAuth string) error {
	info := dns01.GetChallengeInfo(ctx, domain, keyAuth)
	p.d.AddTXT(info.EffectiveFQDN, info.Value)
	return nil
}

func (p relayLegoDNS) CleanUp(ctx context.Context, domain, _, keyAuth string) error {
	info := dns01.GetChallengeInfo(ctx, domain, keyAuth)
	p.d.DeleteTXT(info.EffectiveFQDN, info.Value)
	return nil
}

func (p relayLegoDNS) Timeout() (time.Duration, time.Duration) {
	return 20 * time.Second, 100 * time.Millisecond
}

// newRelayLego returns a lego client registered at the proxy's directory,
// proving control by dns-01 through d.
func newRelayLego(t *testing.T, ctx context.Context, directory string, hc *http.Client, d *testdns.Server) *lego.Client {
	t.Helper()
	// lego's resolver for dns-01 is process-wide; every test DNS server
	// serves the same zone, but each test has its own, so point lego at
	// the current one.
	dns01.SetDefaultClient(dns01.NewClient(&dns01.Options{RecursiveNameservers: []string{d.Addr}, Timeout: 2 * time.Second}))
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u := &relayLegoUser{key: key}
	cfg := lego.NewConfig(u)
	cfg.CADirURL = directory
	cfg.HTTPClient = hc
	cfg.Certificate.Timeout = 40 * time.Second
	c, err := lego.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true})
	if err != nil {
		t.Fatalf("lego register: %v", err)
	}
	u.reg = reg
	if err := c.Challenge.SetDNS01Provider(relayLegoDNS{d},
		dns01.DisableAuthoritativeNssPropagationRequirement(), dns01.PropagationWait(0, true)); err != nil {
		t.Fatal(err)
	}
	return c
}

// relayWaitFor polls cond every 20ms until it holds or d passes.
func relayWaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
