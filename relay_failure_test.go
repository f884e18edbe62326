package caddyacmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/letsencrypt/pebble/v2/ca"
	"go.uber.org/zap"
	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/relay"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// These tests assemble the relay profile by hand — store, queue, runner,
// ACME server, relay signer, dns01 through the test DNS provider — the way
// the Caddy glue does, but with a runner whose backoff is milliseconds, so
// that retries can be watched without waiting for production backoff.

// relayProcess is one process serving a relay profile: a restart is a new
// relayProcess over the same database and storage.
type relayProcess struct {
	db     *store.DB
	queue  *jobs.Queue
	srv    *acmeproxy.Server
	runner *jobs.Runner
	ts     *httptest.Server
	dirURL string
	// handlers and runnerOpts build the runner; a test that stopped it
	// starts another with them.
	handlers   []jobs.Handler
	runnerOpts jobs.RunnerOptions
}

type relayProfiles map[string]*acmeproxy.Server

func (p relayProfiles) Lookup(name string) (*authority.Authority, bool) {
	s, ok := p[name]
	if !ok {
		return nil, false
	}
	return s.Authority(), true
}

// relayBench is what the processes of one test share, down to the
// address clients reach them at: a restarted process serves the same URLs.
type relayBench struct {
	t       *testing.T
	dns     *testdns.Server
	pebble  *relayPebble
	dbPath  string
	storage certmagic.Storage
	front   *httptest.Server
	current atomic.Pointer[acmeproxy.Server]
	// revokeWait is the processes' acmeproxy.Options.RevokeWait.
	revokeWait time.Duration
	// configure, if set, adjusts the profile's configuration.
	configure func(*acmeproxy.ProfileConfig)
	// prepareUpstream is the signer's PrepareUpstream.
	prepareUpstream bool
	// directory, if set, is the signer's directory URL instead of
	// Pebble's; logger, if set, the processes' logger.
	directory string
	logger    *zap.Logger
}

func newRelayBench(t *testing.T) *relayBench {
	t.Helper()
	return newRelayBenchWithPebbleProfiles(t, map[string]ca.Profile{"default": {Description: "default"}})
}

// newRelayBenchWithPebbleProfiles is newRelayBench with a Pebble offering
// the given certificate profiles.
func newRelayBenchWithPebbleProfiles(t *testing.T, profiles map[string]ca.Profile) *relayBench {
	t.Helper()
	d := startRelayDNS(t)
	relayDNSServers.Store(t.Name(), d)
	t.Cleanup(func() { relayDNSServers.Delete(t.Name()) })
	dir := t.TempDir()
	b := &relayBench{
		t: t, dns: d, pebble: startRelayPebbleWithProfiles(t, d.Addr, 1, false, profiles),
		dbPath: filepath.Join(dir, "acme.db"), storage: &certmagic.FileStorage{Path: filepath.Join(dir, "storage")},
	}
	b.front = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := b.current.Load(); s != nil && s.Handles(r.URL.Path) {
			s.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(b.front.Close)
	return b
}

// start builds a process and starts its runner.
func (b *relayBench) start() *relayProcess {
	t := b.t
	t.Helper()
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, b.dbPath, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, nil)
	directory := b.pebble.dir
	if b.directory != "" {
		directory = b.directory
	}
	sgn, err := relay.New(relay.Options{
		Directory: directory, Email: "relay@example.com", Challenge: relay.ChallengeDNS01,
		DNS: &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{
			DNSProvider: &relayDNSProvider{Server: t.Name()}, PropagationTimeout: -1, Resolvers: []string{b.dns.Addr},
		}},
		Storage: b.storage, RootCAs: b.pebble.tlsRoots(), PollInterval: 50 * time.Millisecond,
		PrepareUpstream: b.prepareUpstream,
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.Config{HTTPPort: 1, TLSPort: 1, Resolvers: []string{b.dns.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := acmeproxy.ProfileConfig{Profile: "relay", Challenges: []string{vocab.ChallengeDNS01}}
	if b.configure != nil {
		b.configure(&cfg)
	}
	srv, err := acmeproxy.NewServer(ctx, cfg,
		acmeproxy.Options{DB: db, Queue: q, Signer: sgn, Validator: v, RevokeWait: b.revokeWait, Logger: b.logger})
	if err != nil {
		t.Fatal(err)
	}
	profiles := relayProfiles{srv.Profile(): srv}
	handlers := append([]jobs.Handler{authority.ValidationJobs(profiles, db, clock.Real())},
		authority.SignerJobHandlers(profiles, []*authority.Authority{srv.Authority()}, nil)...)
	handlers = append(handlers, authority.RevocationJobHandlers(profiles, func() []*authority.Authority { return []*authority.Authority{srv.Authority()} }, db, clock.Real(), nil)...)
	opts := jobs.RunnerOptions{
		BackoffBase: 50 * time.Millisecond, BackoffCap: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond,
		// The relay's jobs are in its profile's signing lane, which the
		// app's runner serves where the relay is mounted.
		Lanes:  []string{signer.SigningLane(srv.Profile()), signer.AnySignerLane},
		Logger: b.logger,
	}
	r, err := jobs.NewRunner(q, handlers, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	b.current.Store(srv)
	return &relayProcess{db: db, queue: q, srv: srv, runner: r, ts: b.front, dirURL: b.front.URL + srv.Prefix() + "/directory",
		handlers: handlers, runnerOpts: opts}
}

// startRelay starts a process on a new relay bench and registers a
// client's account at it: where the relay tests that need nothing of the
// bench before its start begin.
func startRelay(t *testing.T, ctx context.Context) (*relayBench, *relayProcess, *acme.Client) {
	t.Helper()
	b := newRelayBench(t)
	p := b.start()
	return b, p, p.client(t, ctx)
}

// client registers an x/crypto/acme account at the process.
func (p *relayProcess) client(t *testing.T, ctx context.Context) *acme.Client {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := &acme.Client{Key: key, DirectoryURL: p.dirURL, HTTPClient: p.ts.Client()}
	if _, err := c.Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
		t.Fatalf("register: %v", err)
	}
	return c
}

// readyOrder places an order for names and proves them by dns-01.
func (b *relayBench) readyOrder(t *testing.T, ctx context.Context, c *acme.Client, names ...string) *acme.Order {
	t.Helper()
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs(names...))
	if err != nil {
		t.Fatalf("new order: %v", err)
	}
	return b.proveOrder(t, ctx, c, o)
}

// proveOrder proves the names of order o by dns-01 and waits until it is
// ready.
func (b *relayBench) proveOrder(t *testing.T, ctx context.Context, c *acme.Client, o *acme.Order) *acme.Order {
	t.Helper()
	for _, u := range o.AuthzURLs {
		z, err := c.GetAuthorization(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range z.Challenges {
			if ch.Type != "dns-01" {
				continue
			}
			rec, err := c.DNS01ChallengeRecord(ch.Token)
			if err != nil {
				t.Fatal(err)
			}
			b.dns.AddTXT("_acme-challenge."+z.Identifier.Value, rec)
			if _, err := c.Accept(ctx, ch); err != nil {
				t.Fatalf("accept: %v", err)
			}
		}
		if _, err := c.WaitAuthorization(ctx, u); err != nil {
			t.Fatalf("authorization: %v", err)
		}
	}
	o, err := c.WaitOrder(ctx, o.URI)
	if err != nil {
		t.Fatalf("order: %v", err)
	}
	return o
}

func relayCSR(t *testing.T, names ...string) []byte {
	t.Helper()
	der, _ := relayCSRAndKey(t, names...)
	return der
}

// relayCSRAndKey is relayCSR with the CSR's key.
func relayCSRAndKey(t *testing.T, names ...string) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: names[0]}, DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func pemOf(ders [][]byte) []byte {
	var out []byte
	for _, d := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
	}
	return out
}

// relayJob returns the relay_issue job of an order; ok is false while
// there is none.
func relayJob(t *testing.T, q *jobs.Queue, orderID string) (store.Job, bool) {
	t.Helper()
	js, err := q.List(context.Background(), store.JobFilter{Kind: relay.IssueKind, Key: orderID})
	if err != nil {
		t.Fatal(err)
	}
	if len(js) == 0 {
		return store.Job{}, false
	}
	return js[0], true
}

func TestARelayWaitsOutAnUnreachableUpstreamAndFinalizesOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b, p, c := startRelay(t, ctx)
	o := b.readyOrder(t, ctx, c, "outage.example.com")
	id := path.Base(o.URI)

	b.pebble.down.Store(true)
	type result struct {
		ders [][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, "outage.example.com"), true)
		done <- result{ders, err}
	}()

	// The relay fails against the dead upstream and retries with backoff,
	// spending attempts; the client meanwhile sees processing.
	relayWaitFor(t, 20*time.Second, "two failed relay attempts", func() bool {
		j, ok := relayJob(t, p.queue, id)
		return ok && j.Attempts >= 2 && j.Status == store.JobReady && j.LastError != ""
	})
	got, err := c.GetOrder(ctx, o.URI)
	if err != nil || got.Status != acme.StatusProcessing {
		t.Fatalf("while the upstream is down the order is %q (%v); want processing", got.Status, err)
	}
	if j, _ := relayJob(t, p.queue, id); !strings.Contains(j.LastError, b.pebble.dir) {
		t.Errorf("last error %q does not name the upstream", j.LastError)
	}

	b.pebble.down.Store(false)
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the order never became valid")
	}
	if r.err != nil {
		t.Fatalf("finalize: %v", r.err)
	}
	b.pebble.checkChainEndsAtRoot(t, pemOf(r.ders), "outage.example.com")
	if got, _ := c.GetOrder(ctx, o.URI); got.Status != acme.StatusValid {
		t.Errorf("order is %q; want valid", got.Status)
	}
	if n := b.pebble.count(pebbleFinalize); n != 1 {
		t.Errorf("Pebble saw %d finalize requests; want exactly 1", n)
	}
	if n := b.pebble.count(pebbleNewOrder); n != 1 {
		t.Errorf("Pebble saw %d new orders; want 1", n)
	}
	if j, _ := relayJob(t, p.queue, id); j.Status != store.JobDone {
		t.Errorf("relay job is %s; want done", j.Status)
	}
}

func TestAnUpstreamRefusalOfANameFailsTheOrderAsRejectedIdentifierAndKeepsTheReasonForTheOperator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := newRelayBench(t)
	if err := b.pebble.store.AddBlockedDomain("blocked.example.com"); err != nil {
		t.Fatal(err)
	}
	p := b.start()
	c := p.client(t, ctx)
	o := b.readyOrder(t, ctx, c, "blocked.example.com")
	id := path.Base(o.URI)

	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, "blocked.example.com"), true); err == nil {
		t.Fatal("finalize succeeded for a name the upstream refuses")
	}
	got, err := c.GetOrder(ctx, o.URI)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != acme.StatusInvalid || got.Error == nil {
		t.Fatalf("order is %q with error %v; want invalid with a problem", got.Status, got.Error)
	}
	// The client hears the refusal as one (a client stops asking for a
	// rejected name; it retries a serverInternal), but not the upstream's
	// words, which are for the operator.
	if got.Error.ProblemType != "urn:ietf:params:acme:error:rejectedIdentifier" ||
		strings.Contains(got.Error.Detail, "blocked") || strings.Contains(got.Error.Detail, "Pebble") {
		t.Errorf("the client's problem is %q %q; want rejectedIdentifier without the upstream's detail", got.Error.ProblemType, got.Error.Detail)
	}

	ro, err := p.db.GetRelayOrder(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("operator detail: %s", ro.FailureDetail)
	for what, detail := range map[string]string{"orders.failure_detail": ro.FailureDetail, "relay_orders.detail": ro.Detail} {
		if !strings.Contains(detail, "rejectedIdentifier") || !strings.Contains(detail, "blocked.example.com") {
			t.Errorf("%s = %q; want the upstream's answer", what, detail)
		}
	}
	if ro.Status != store.RelayInvalid {
		t.Errorf("relay mapping is %s; want invalid", ro.Status)
	}
	if j, _ := relayJob(t, p.queue, id); j.Status != store.JobFailed || j.Attempts != 1 {
		t.Errorf("relay job is %s after %d attempts; want failed after 1 (a CA's stated reason is permanent)", j.Status, j.Attempts)
	}
}

func TestTwoConcurrentFinalizesOfOneOrderPlaceOneUpstreamOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, p, c := startRelay(t, ctx)
	o := b.readyOrder(t, ctx, c, "twice.example.com")
	id := path.Base(o.URI)
	csr := relayCSR(t, "twice.example.com")

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		oks  int
		errs []error
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				oks++
			} else {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if oks != 1 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "orderNotReady") {
		t.Errorf("%d finalizes succeeded, errors %v; want one success and one orderNotReady", oks, errs)
	}
	if n := b.pebble.count(pebbleNewOrder); n != 1 {
		t.Errorf("Pebble saw %d new orders; want 1", n)
	}
	if n := b.pebble.count(pebbleFinalize); n != 1 {
		t.Errorf("Pebble saw %d finalizes; want 1", n)
	}
	j, _ := relayJob(t, p.queue, id)
	ord, err := p.db.GetOrder(ctx, "relay", id)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Deadline.Equal(ord.Expires) {
		t.Errorf("relay job deadline %v; want the order's expiry %v", j.Deadline, ord.Expires)
	}
}

func TestRelaysInFlightAreRequeuedWhenAProcessStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	b, first, c := startRelay(t, ctx)

	// One relay completes normally, registering the upstream account.
	o := b.readyOrder(t, ctx, c, "first.example.com")
	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, "first.example.com"), true); err != nil {
		t.Fatalf("finalize: %v", err)
	}

	// Two more were claimed and mapped by a finalize that died before it
	// queued their jobs.
	var stranded []*acme.Order
	for _, name := range []string{"second.example.com", "third.example.com"} {
		o := b.readyOrder(t, ctx, c, name)
		id := path.Base(o.URI)
		csr := relayCSR(t, name)
		if won, err := first.db.ClaimOrderForIssue(ctx, id, csr, store.OrderClient{}, "", time.Now()); err != nil || !won {
			t.Fatalf("claim: %v %v", won, err)
		}
		if _, _, err := first.db.CreateRelayOrder(ctx, store.NewRelayOrder{OrderID: id, Profile: "relay", CSR: csr}, time.Now()); err != nil {
			t.Fatal(err)
		}
		stranded = append(stranded, o)
	}
	if err := first.runner.Stop(); err != nil {
		t.Fatal(err)
	}

	// A new process, with a new signer that loads the account from
	// storage, finishes them at start.
	b.start()
	for _, o := range stranded {
		got, err := c.WaitOrder(ctx, o.URI)
		if err != nil {
			t.Fatalf("stranded order: %v", err)
		}
		ders, err := c.FetchCert(ctx, got.CertURL, true)
		if err != nil {
			t.Fatal(err)
		}
		b.pebble.checkChainEndsAtRoot(t, pemOf(ders), got.Identifiers[0].Value)
	}
	if n := b.pebble.count(pebbleNewAccount); n != 1 {
		t.Errorf("Pebble saw %d new accounts; want 1, registered once and reused across processes", n)
	}
}
