package acmeproxy

import (
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"

	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// testEnv is one profile served over real HTTPS on loopback, with a real
// store (of the running test's dialect: see eachDialect), a real job runner, the real local CA signer and the real
// validators, whose connections for any name go to this machine's
// challenge responders.
type testEnv struct {
	t      *testing.T
	srv    *Server
	ts     *httptest.Server
	db     *store.DB
	queue  *jobs.Queue
	root   *x509.Certificate
	dirURL string
	http01 *http01Responder
	runner *jobs.Runner
	ca     *testCA
}

// http01Responder answers http-01 challenges like a client's standalone
// server would.
type http01Responder struct {
	mu     sync.Mutex
	tokens map[string]string
	port   int
	// before, when set, runs before each answer (a test holds one back).
	before func(path string)
}

func (h *http01Responder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	body, ok := h.tokens[r.URL.Path]
	before := h.before
	h.mu.Unlock()
	if before != nil {
		before(r.URL.Path)
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(body))
}

func (h *http01Responder) set(token, keyAuth string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tokens["/.well-known/acme-challenge/"+token] = keyAuth
}

func newTestCA(t testing.TB) (*x509.Certificate, localca.Source) {
	t.Helper()
	return newTestCAAt(t, time.Now())
}

// newTestCAAt is newTestCA valid around now, for a test on a fake clock.
func newTestCAAt(t testing.TB, now time.Time) (*x509.Certificate, localca.Source) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "acmeproxy test root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(der)
	return root, localca.Static([]*x509.Certificate{root}, key)
}

func newTestEnv(t *testing.T, mutate func(*ProfileConfig)) *testEnv {
	t.Helper()
	return newTestEnvWith(t, envOptions{mutate: mutate})
}

// envOptions vary what newTestEnvWith builds. The zero value is
// newTestEnv's environment.
type envOptions struct {
	mutate func(*ProfileConfig)
	// dbPath, when set, is the store's place (newPlace: a SQLite file or
	// a PostgreSQL database, by the running test's dialect): a second
	// environment at the same place is the same service after a restart,
	// or another instance.
	dbPath string
	// ca, when set, is the issuing CA (from newTestCA) instead of a new one.
	ca *testCA
	// opts adjust the server's options.
	opts func(*Options)
	// wrap, when set, makes the profile's signer from the local CA's.
	wrap func(*localca.Signer) signer.Signer
	// handlers are more job handlers for the runner (notify_deliver).
	handlers []jobs.Handler
	// profileHandlers, when set, makes more job handlers over the
	// environment's profiles (signer_issue).
	profileHandlers func(authority.Profiles) []jobs.Handler
	// runner tunes the job runner (short backoffs).
	runner jobs.RunnerOptions
	// wrapJobs, when set, stands in for each job handler the runner is
	// given (to hold an attempt's outcome, say).
	wrapJobs func(jobs.Handler) jobs.Handler
	// sqlite tunes the store (a bounded size).
	sqlite store.SQLiteOptions
}

// testCA is a test CA: its root and its source.
type testCA struct {
	root *x509.Certificate
	src  localca.Source
}

func newTestEnvWith(t *testing.T, eo envOptions) *testEnv {
	t.Helper()
	ctx := context.Background()
	if eo.dbPath == "" {
		eo.dbPath = newPlace(t)
	}
	db, err := dialectOf(t).openAt(ctx, eo.dbPath, eo.sqlite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, nil)

	h01 := &http01Responder{tokens: map[string]string{}}
	hs := httptest.NewServer(h01)
	t.Cleanup(hs.Close)
	_, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	h01.port, _ = strconv.Atoi(port)

	if eo.ca == nil {
		root, src := newTestCA(t)
		eo.ca = &testCA{root: root, src: src}
	}
	root, src := eo.ca.root, eo.ca.src
	sgn, err := localca.New(src, localca.Options{Lifetime: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.Config{
		HTTPPort: h01.port, TLSPort: 1, Resolvers: []string{"127.0.0.1:1"},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, p, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", p))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ProfileConfig{Profile: "test", Challenges: []string{vocab.ChallengeHTTP01, vocab.ChallengeDNS01}}
	if eo.mutate != nil {
		eo.mutate(&cfg)
	}
	opts := Options{DB: db, Queue: q, Signer: sgn, Validator: v}
	if eo.wrap != nil {
		opts.Signer = eo.wrap(sgn)
	}
	if eo.opts != nil {
		eo.opts(&opts)
	}
	srv, err := NewServer(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	profiles := staticProfiles{srv.Profile(): srv}
	handlers := append([]jobs.Handler{authority.ValidationJobs(profiles, db, srv.clock)},
		authority.RevocationJobHandlers(profiles, func() []*authority.Authority { return []*authority.Authority{srv.Authority()} }, db, srv.clock, nil)...)
	handlers = append(handlers, eo.handlers...)
	if eo.profileHandlers != nil {
		handlers = append(handlers, eo.profileHandlers(profiles)...)
	}
	if eo.wrapJobs != nil {
		for i, h := range handlers {
			handlers[i] = eo.wrapJobs(h)
		}
	}
	if eo.runner.Lanes == nil {
		eo.runner.Lanes = signingLanes(srv)
	}
	r, err := jobs.NewRunner(q, handlers, eo.runner)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })

	// As the Caddy handler routes (handler.go): the profile's paths to
	// srv as they came, anything else on. A ServeMux here would clean the
	// paths (answering a redirect) before srv saw them.
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !srv.Handles(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return &testEnv{t: t, srv: srv, ts: ts, db: db, queue: q, root: root, runner: r, ca: eo.ca,
		dirURL: ts.URL + srv.Prefix() + "/directory", http01: h01}
}

// signingLanes are the lanes the app's runner serves for srv's profile
// (none when it is served without its signer).
func signingLanes(srv *Server) []string {
	if l := srv.Authority().SigningLane(); l != "" {
		return []string{l, signer.AnySignerLane}
	}
	return []string{}
}

type staticProfiles map[string]*Server

func (p staticProfiles) Lookup(name string) (*authority.Authority, bool) {
	s, ok := p[name]
	if !ok {
		return nil, false
	}
	return s.Authority(), true
}

func (p staticProfiles) All() []*authority.Authority {
	var out []*authority.Authority
	for _, s := range p {
		out = append(out, s.Authority())
	}
	return out
}

// client returns an x/crypto/acme client with a new registered account.
func (e *testEnv) client(ctx context.Context) *acme.Client {
	e.t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := &acme.Client{Key: key, DirectoryURL: e.dirURL, HTTPClient: e.ts.Client()}
	if _, err := c.Register(ctx, &acme.Account{Contact: []string{"mailto:ops@example.com"}}, acme.AcceptTOS); err != nil {
		e.t.Fatalf("register: %v", err)
	}
	return c
}

// authorize answers every authorization of an order by http-01 and waits
// for the order to be ready.
func (e *testEnv) authorize(ctx context.Context, c *acme.Client, o *acme.Order) *acme.Order {
	e.t.Helper()
	for _, u := range o.AuthzURLs {
		z, err := c.GetAuthorization(ctx, u)
		if err != nil {
			e.t.Fatal(err)
		}
		var chal *acme.Challenge
		for _, ch := range z.Challenges {
			if ch.Type == "http-01" {
				chal = ch
			}
		}
		if chal == nil {
			e.t.Fatalf("no http-01 challenge offered for %s", z.Identifier.Value)
		}
		ka, err := c.HTTP01ChallengeResponse(chal.Token)
		if err != nil {
			e.t.Fatal(err)
		}
		e.http01.set(chal.Token, ka)
		if _, err := c.Accept(ctx, chal); err != nil {
			e.t.Fatalf("accept: %v", err)
		}
		if _, err := c.WaitAuthorization(ctx, z.URI); err != nil {
			e.t.Fatalf("authorization of %s: %v", z.Identifier.Value, err)
		}
	}
	o, err := c.WaitOrder(ctx, o.URI)
	if err != nil {
		e.t.Fatalf("order: %v", err)
	}
	return o
}

func newCSR(t testing.TB, key crypto.Signer, cn string, dns []string, ips []net.IP) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn}, DNSNames: dns, IPAddresses: ips,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
