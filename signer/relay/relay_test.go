package relay

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/internal/signertest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// fakeSettler records what a signer reports.
type fakeSettler struct {
	mu     sync.Mutex
	issued map[string][][]byte
	// alternates are the alternate chains recorded with issued's.
	alternates map[string][][][]byte
	failed     map[string][]string
	refused    map[string]signer.Kind
	// refusedDetail is the client's detail of each refusal;
	// refusedSubs its subproblems.
	refusedDetail map[string]string
	refusedSubs   map[string][]signer.Subproblem
	// failErr, while set, is what Failed and Refused answer, recording
	// nothing (the database away).
	failErr error
}

func (f *fakeSettler) Issued(_ context.Context, id string, chain [][]byte, alternates ...[][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued[id] = chain
	if f.alternates == nil {
		f.alternates = map[string][][][]byte{}
	}
	f.alternates[id] = alternates
	return nil
}

func (f *fakeSettler) Failed(_ context.Context, id, detail string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failErr != nil {
		return f.failErr
	}
	f.failed[id] = append(f.failed[id], detail)
	return nil
}

// Refused records the refusal's kind and its client's detail, and the
// operator's detail as a failure.
func (f *fakeSettler) Refused(ctx context.Context, id string, refusal *signer.Error, detail string) error {
	f.mu.Lock()
	if f.failErr != nil {
		defer f.mu.Unlock()
		return f.failErr
	}
	if f.refused == nil {
		f.refused = map[string]signer.Kind{}
		f.refusedDetail = map[string]string{}
		f.refusedSubs = map[string][]signer.Subproblem{}
	}
	f.refused[id] = refusal.Kind
	f.refusedDetail[id] = refusal.Detail
	f.refusedSubs[id] = refusal.Subproblems
	f.mu.Unlock()
	return f.Failed(ctx, id, "refused: "+detail)
}

// bench is a bound relay signer over a real store, with a fake clock and
// an upstream the test provides.
type bench struct {
	db      *store.DB
	queue   *jobs.Queue
	clock   *clocktest.Fake
	settler *fakeSettler
	s       *Signer
}

func newBench(t *testing.T, directory, challenge string, tweak ...func(*Options)) *bench {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return benchOn(t, db, clocktest.New(time.Now()), &fakeSettler{issued: map[string][][]byte{}, failed: map[string][]string{}},
		directory, challenge, tweak...)
}

// benchOn is a bench over db, clk and settler, which other benches may
// share: an instance of a fleet on one database has a store (a pool) of
// its own, a Caddy storage of its own, and the fleet's clock.
func benchOn(t *testing.T, db *store.DB, clk *clocktest.Fake, settler *fakeSettler, directory, challenge string, tweak ...func(*Options)) *bench {
	t.Helper()
	return benchLogging(t, db, clk, settler, zap.NewNop(), directory, challenge, tweak...)
}

// benchLogging is benchOn whose signer logs to log.
func benchLogging(t *testing.T, db *store.DB, clk *clocktest.Fake, settler *fakeSettler, log *zap.Logger, directory, challenge string, tweak ...func(*Options)) *bench {
	t.Helper()
	b := &bench{db: db, queue: jobs.NewQueue(db, clk), clock: clk, settler: settler}
	opts := Options{Directory: directory, Challenge: challenge, Storage: &certmagic.FileStorage{Path: filepath.Join(t.TempDir(), "storage")}, Clock: clk}
	if challenge == ChallengeDNS01 {
		opts.DNS = &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{DNSProvider: nopDNS{}}}
	}
	for _, f := range tweak {
		f(&opts)
	}
	var err error
	if b.s, err = New(opts); err != nil {
		t.Fatal(err)
	}
	if err := b.s.Bind(signer.Binding{Profile: "p", Settler: b.settler, Queue: b.queue, DB: db, Logger: log}); err != nil {
		t.Fatal(err)
	}
	return b
}

type nopDNS struct{ certmagic.DNSProvider }

// finalized creates an order claimed for issue, as finalize hands it over,
// and returns the signer's request for it.
func (b *bench) finalized(t *testing.T, name string) signer.IssueRequest {
	t.Helper()
	return b.finalizedAfter(t, name, nil)
}

// finalizedAfter is finalized, with beforeClaim (if set) run once the
// order is ready, before its finalize claims it.
func (b *bench) finalizedAfter(t *testing.T, name string, beforeClaim func(orderID string)) signer.IssueRequest {
	t.Helper()
	req, _ := signertest.Finalized(t, b.db, b.clock.Now(), name, beforeClaim)
	return req
}

// refused finalizes an order of name, runs its relay job once and
// abandons the job with the attempt's outcome, as the runner does after
// an attempt that failed for good; the test fails unless the attempt
// failed and naming, if set, is in its outcome. It returns the order's
// request.
func (b *bench) refused(ctx context.Context, t *testing.T, name, naming string) signer.IssueRequest {
	t.Helper()
	req := b.finalized(t, name)
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	job := b.job(t, req.OrderID)
	out := b.s.RunJob(ctx, job)
	if out.Kind() != "failed" || !strings.Contains(out.String(), naming) {
		t.Fatalf("the attempt: %s; want failed (a stated reason is not retried), naming %q", out, naming)
	}
	if err := b.s.AbandonJob(ctx, job, out.String()); err != nil {
		t.Fatal(err)
	}
	return req
}

// checkRefusedOnce fails the test unless the order was settled failed
// once, refused as want (zero: the generic failure).
func (b *bench) checkRefusedOnce(t *testing.T, orderID string, want signer.Kind) {
	t.Helper()
	b.settler.mu.Lock()
	defer b.settler.mu.Unlock()
	if got := b.settler.refused[orderID]; got != want {
		t.Errorf("the order failed with refusal %d; want %d", got, want)
	}
	if n := len(b.settler.failed[orderID]); n != 1 {
		t.Errorf("the order was settled %d times; want once", n)
	}
}

// binding is what the bench's signer is bound to.
func (b *bench) binding(t *testing.T) *signer.Binding {
	t.Helper()
	bound, _, err := b.s.binding()
	if err != nil {
		t.Fatal(err)
	}
	return bound
}

// job returns the live relay job of an order.
func (b *bench) job(t *testing.T, orderID string) *jobs.Job {
	t.Helper()
	js, err := b.queue.List(context.Background(), store.JobFilter{Kind: IssueKind, Key: orderID})
	if err != nil || len(js) != 1 {
		t.Fatalf("relay jobs of %s: %d (%v); want 1", orderID, len(js), err)
	}
	return &js[0]
}

func TestIssueMapsTheOrderAndQueuesOneJobHoweverOftenItIsCalled(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, "https://ca.example/dir", ChallengeBypass)
	req := b.finalized(t, "a.example.com")
	for range 3 {
		out, err := b.s.Issue(ctx, req)
		if err != nil || !out.Pending || len(out.Chain) != 0 {
			t.Fatalf("issue: %+v %v; want pending", out, err)
		}
	}
	j := b.job(t, req.OrderID)
	ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if !j.Deadline.Equal(ro.Expires) || j.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("job deadline %v, %d attempts; want the order's expiry %v, %d", j.Deadline, j.MaxAttempts, ro.Expires, DefaultMaxAttempts)
	}
	if ro.ClientAddr != "10.1.2.3" || ro.UserAgent != "test-client" || string(ro.CSR) != string(req.CSRDER) {
		t.Errorf("mapping %+v does not keep the client's context and CSR", ro)
	}
}

func TestARateLimitCoolsTheWholeProfileDown(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int32
	up := fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		problemAnswer(429, acme.ProblemTypeRateLimited, "too many registrations", "Retry-After", "120")(w, r)
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	one, two := b.finalized(t, "one.example.com"), b.finalized(t, "two.example.com")
	for _, req := range []signer.IssueRequest{one, two} {
		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	out := b.s.RunJob(ctx, b.job(t, one.OrderID))
	if got := out.String(); !strings.HasPrefix(got, "retry after 2m0s: ") || !strings.Contains(got, "too many registrations") {
		t.Fatalf("first relay: %s; want to wait the upstream's 2 minutes", got)
	}
	seen := hits.Load()
	b.clock.Advance(30 * time.Second)
	out = b.s.RunJob(ctx, b.job(t, two.OrderID))
	if got := out.String(); !strings.HasPrefix(got, "retry after 1m30s: ") {
		t.Errorf("another order of the profile: %s; want it to wait out the rest of the cool-down", got)
	}
	if hits.Load() != seen {
		t.Errorf("the upstream was asked again during the cool-down")
	}
	b.clock.Advance(90 * time.Second)
	b.s.RunJob(ctx, b.job(t, two.OrderID))
	if hits.Load() == seen {
		t.Errorf("the upstream was not asked again after the cool-down")
	}
}

func TestAbandonFailsTheOrderWithTheRealReasonForTheOperator(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, "https://ca.example/dir", ChallengeBypass)
	req := b.finalized(t, "a.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	j := b.job(t, req.OrderID)
	if err := b.s.AbandonJob(ctx, j, "deadline passed; last error: HTTP 503"); err != nil {
		t.Fatal(err)
	}
	if err := b.s.AbandonJob(ctx, j, "again, after a crash"); err != nil { // idempotent for the mapping
		t.Fatal(err)
	}

	if got := b.settler.failed[req.OrderID]; len(got) == 0 || !strings.Contains(got[0], "https://ca.example/dir") || !strings.Contains(got[0], "HTTP 503") {
		t.Errorf("settler told %q; want the upstream and the reason", got)
	}
	ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if ro.Status != store.RelayInvalid || !strings.Contains(ro.Detail, "HTTP 503") {
		t.Errorf("mapping %s %q; want invalid with the first reason", ro.Status, ro.Detail)
	}
	// A finalize resumed after this answers with the failure instead of
	// queueing the relay again.
	if _, err := b.s.Issue(ctx, req); err == nil || !strings.Contains(err.Error(), "already failed") {
		t.Errorf("issue after abandon: %v; want an error", err)
	}
}

func TestWhatTheUpstreamChallengeCannotProveIsRefused(t *testing.T) {
	for challenge, refused := range map[string]bool{ChallengeHTTP01: true, ChallengeDNS01: false, ChallengeBypass: false} {
		b := newBench(t, "https://ca.example/dir", challenge)
		err := b.s.CheckIdentifier(vocab.Identifier{Type: "dns", Value: "*.example.com"})
		if e, ok := signer.AsError(err); refused != (ok && e.Kind == signer.KindRejectedIdentifier) {
			t.Errorf("%s: wildcard check %v; want refused=%v", challenge, err, refused)
		}
		if err := b.s.CheckIdentifier(vocab.Identifier{Type: "dns", Value: "www.example.com"}); err != nil {
			t.Errorf("%s: refused a plain name: %v", challenge, err)
		}
		err = b.s.CheckIdentifier(vocab.Identifier{Type: "ip", Value: "192.0.2.1"})
		if ipRefused := challenge == ChallengeDNS01; ipRefused != (err != nil) {
			t.Errorf("%s: IP address check %v; want refused=%v", challenge, err, ipRefused)
		}
	}
}

func TestNewRefusesAnIncompleteConfiguration(t *testing.T) {
	st := &certmagic.FileStorage{Path: t.TempDir()}
	for name, opts := range map[string]Options{
		"no directory":      {Challenge: ChallengeBypass, Storage: st},
		"relative dir":      {Directory: "/dir", Challenge: ChallengeBypass, Storage: st},
		"no storage":        {Directory: "https://ca.example/dir", Challenge: ChallengeBypass},
		"dns01 without dns": {Directory: "https://ca.example/dir", Challenge: ChallengeDNS01, Storage: st},
		"unknown challenge": {Directory: "https://ca.example/dir", Challenge: "tls-alpn01", Storage: st},
		"eab without key":   {Directory: "https://ca.example/dir", Challenge: ChallengeBypass, Storage: st, EAB: &acme.EAB{KeyID: "k"}},
		"eab bad key":       {Directory: "https://ca.example/dir", Challenge: ChallengeBypass, Storage: st, EAB: &acme.EAB{KeyID: "k", MACKey: "not base64!"}},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAnotherInstanceAnswersAPublishedHTTPChallenge plays the instance that
// did not relay: a certmagic ACME issuer of its own over the same storage,
// with nothing in process memory, answers the upstream's request as
// Caddy's HTTP challenge handler does.
func TestAnotherInstanceAnswersAPublishedHTTPChallenge(t *testing.T) {
	ctx := context.Background()
	st := &certmagic.FileStorage{Path: t.TempDir()}
	defaultCA := certmagic.LetsEncryptProductionCA
	pub := &httpPublisher{storage: st, ownKey: "ca.internal.example-dir",
		issuerKeys: func(string) []string { return []string{(&certmagic.ACMEIssuer{CA: defaultCA}).IssuerKey()} }}
	chal := acme.Challenge{Type: "http-01", Token: "tok_123", KeyAuthorization: "tok_123.thumbprint",
		Identifier: acme.Identifier{Type: "dns", Value: "host.example.com"}}

	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return nil, nil }, Logger: zap.NewNop()})
	defer cache.Stop()
	cfg := certmagic.New(cache, certmagic.Config{Storage: st, Logger: zap.NewNop()})
	other := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{CA: defaultCA, Logger: zap.NewNop()})
	cfg.Issuers = []certmagic.Issuer{other}
	ask := func(host string) (bool, string) {
		req := httptest.NewRequest(http.MethodGet, "http://"+host+"/.well-known/acme-challenge/tok_123", nil)
		rec := httptest.NewRecorder()
		handled := other.HandleHTTPChallenge(rec, req)
		body, _ := io.ReadAll(rec.Body)
		return handled, string(body)
	}

	if handled, _ := ask("host.example.com"); handled {
		t.Fatal("answered before anything was published")
	}
	if err := pub.Present(ctx, chal); err != nil {
		t.Fatal(err)
	}
	if handled, body := ask("host.example.com"); !handled || body != "tok_123.thumbprint" {
		t.Errorf("other instance: handled=%v body=%q; want the key authorization", handled, body)
	}
	if handled, _ := ask("other.example.com"); handled {
		t.Error("answered for another host")
	}
	for _, k := range pub.keys("host.example.com") {
		raw, err := st.Load(ctx, k)
		var got acme.Challenge
		if err != nil || json.Unmarshal(raw, &got) != nil || got.KeyAuthorization != chal.KeyAuthorization {
			t.Errorf("%s: %v %q", k, err, raw)
		}
	}
	if err := pub.CleanUp(ctx, chal); err != nil {
		t.Fatal(err)
	}
	if handled, _ := ask("host.example.com"); handled {
		t.Error("still answered after clean-up")
	}
	// The name's lock was released: the next challenge can be presented.
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pub.Present(lctx, chal); err != nil {
		t.Fatalf("second present: %v", err)
	}
	_ = pub.CleanUp(ctx, chal)
}

func TestAnUpstreamOrderStillProcessingIsWaitedForAsTheUpstreamAsks(t *testing.T) {
	ctx := context.Background()
	var (
		up        *httptest.Server
		newOrders atomic.Int32
	)
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/order" {
			newOrders.Add(1)
		}
		switch r.URL.Path {
		case "/order", "/order/1":
			w.Header().Set("Location", up.URL+"/order/1")
			w.Header().Set("Retry-After", "300")
			_, _ = w.Write([]byte(`{"status":"processing","identifiers":[{"type":"dns","value":"slow.example.com"}],"finalize":"` + up.URL + `/finalize/1"}`))
		default:
			http.NotFound(w, r)
		}
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "slow.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	if !strings.HasPrefix(out, "retry after 5m0s: ") {
		t.Errorf("outcome %q; want to come back when the upstream said, without spending an attempt", out)
	}
	ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil || ro.UpstreamOrderURL != up.URL+"/order/1" {
		t.Errorf("upstream order recorded as %q (%v)", ro.UpstreamOrderURL, err)
	}
	// The next attempt reads the recorded order rather than placing another.
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); !strings.HasPrefix(out, "retry after 5m0s: ") {
		t.Errorf("second attempt: %q", out)
	}
	if n := newOrders.Load(); n != 1 {
		t.Errorf("the upstream got %d new orders; want 1", n)
	}
}
