package acmeproxy

import (
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"

	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestTheCRLIsServedWithCachingHeadersFromItsNextUpdate(t *testing.T) {
	e := newTestEnv(t, nil)
	crl := e.crl(func(*x509.RevocationList) bool { return true })
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, e.url("/crl"), nil)
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != http.StatusOK || h.Get("Content-Type") != "application/pkix-crl" {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, h.Get("Content-Type"))
		}
		expires, err := http.ParseTime(h.Get("Expires"))
		if err != nil || !expires.Equal(crl.NextUpdate) {
			t.Errorf("%s: Expires %q; want the nextUpdate %v", method, h.Get("Expires"), crl.NextUpdate)
		}
		maxAge, ok := strings.CutPrefix(h.Get("Cache-Control"), "public, max-age=")
		secs, err := strconv.Atoi(maxAge)
		if !ok || err != nil || secs <= 0 || time.Duration(secs)*time.Second > time.Until(crl.NextUpdate)+time.Second {
			t.Errorf("%s: Cache-Control %q; want public with max-age up to the nextUpdate", method, h.Get("Cache-Control"))
		}
	}
	resp, err := e.ts.Client().Post(e.url("/crl"), "application/jose+json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST crl: %d; want 405", resp.StatusCode)
	}
}

func TestAProfileWhoseSignerPublishesNoCRLServesNone(t *testing.T) {
	e := newTestEnvWith(t, envOptions{wrap: func(*localca.Signer) signer.Signer { return &sjSigner{} }})
	resp, err := e.ts.Client().Get(e.url("/crl"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET crl: %d; want 404", resp.StatusCode)
	}
}

func TestCRLsAreRefreshedWellBeforeNextUpdateAndWhenStale(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	clk := clocktest.New(start)
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q := jobs.NewQueue(db, clk)
	_, src := newTestCA(t)
	sgn, err := localca.New(src, localca.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(ctx, ProfileConfig{Profile: "p"}, Options{DB: db, Queue: q, Signer: sgn, Validator: sjValidator{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		js, err := q.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Status: store.JobReady})
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	clearQueue := func() {
		js, _ := q.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Status: store.JobReady})
		for _, j := range js {
			if _, err := q.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil || queued() != 1 {
		t.Fatalf("with no CRL: %v, %d jobs queued; want 1", err, queued())
	}
	clearQueue()
	crl, err := s.Authority().RegenerateCRL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !crl.ThisUpdate.Equal(start.UTC().Truncate(time.Second)) || crl.NextUpdate.Sub(crl.ThisUpdate) != authority.CRLValidity {
		t.Errorf("thisUpdate %v nextUpdate %v", crl.ThisUpdate, crl.NextUpdate)
	}
	clk.Advance(authority.CRLRefreshAge - time.Minute)
	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil || queued() != 0 {
		t.Fatalf("a fresh CRL: %v, %d jobs queued; want none", err, queued())
	}
	clk.Advance(2 * time.Minute)
	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil || queued() != 1 {
		t.Fatalf("a CRL %s old: %v, %d jobs queued; want 1, %s before its nextUpdate", authority.CRLRefreshAge+time.Minute, err, queued(),
			authority.CRLValidity-authority.CRLRefreshAge-time.Minute)
	}
	clearQueue()
	if _, err := s.Authority().RegenerateCRL(ctx); err != nil {
		t.Fatal(err)
	}
	// A ledger row the CRL lacks makes it stale at once.
	if err := db.InsertAudit(ctx, store.AuditEvent{At: clk.Now(), Event: "x", Outcome: authority.OutcomeSuccess}); err != nil {
		t.Fatal(err)
	}
	if err := authority.RefreshCRLs(ctx, []*authority.Authority{s.Authority()}); err != nil || queued() != 0 {
		t.Fatalf("an audit row is not a revocation: %v, %d queued", err, queued())
	}
}

func TestIssuanceAndItsFailureAreAudited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := newTestEnvWith(t, envOptions{opts: func(o *Options) {
		o.LookupAddr = func(context.Context, string) ([]string, error) { return []string{"client.test."}, nil }
	}})
	c := e.client(ctx)
	cert := e.issue(ctx, c, "audited.example.com")
	rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateIssued, OrderID: cert.order})
	if len(rows) != 1 {
		t.Fatalf("%d certificate_issued rows; want 1", len(rows))
	}
	r := rows[0]
	if r.Outcome != authority.OutcomeSuccess || r.Serial != hex.EncodeToString(cert.leaf.SerialNumber.Bytes()) || r.AccountID == "" || r.ClientIP != "127.0.0.1" ||
		r.ClientName != "client.test" || !strings.Contains(r.UserAgent, "acme") || len(r.Identifiers) != 1 || r.Profile != "test" {
		t.Errorf("issuance row %+v", r)
	}

	// An order asking to start after the CA expires (in a day), yet
	// within the 48 hours a notBefore may lie ahead, cannot be signed.
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs("late.example.com"), acme.WithOrderNotBefore(time.Now().Add(36*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	o = e.authorize(ctx, c, o)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "", []string{"late.example.com"}, nil), true); err == nil {
		t.Fatal("finalize succeeded past the CA's lifetime")
	}
	rows = auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateIssueFailed})
	if len(rows) != 1 || rows[0].Outcome != authority.OutcomeFailure || rows[0].Detail == "" || rows[0].ClientIP != "127.0.0.1" {
		t.Errorf("failure rows %+v; want one with the signer's reason", rows)
	}
}

func TestLeavesCarryTheConfiguredCRLURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const url = "http://crl.example.test/acme/test/crl"
	e := newTestEnv(t, func(c *ProfileConfig) { c.CRLURL = url })
	cert := e.issue(ctx, e.client(ctx), "dp.example.com")
	// crl_url is the base: the leaf names its own CA's CRL below it.
	want := url + "/" + signer.CAKeyID(e.root)
	if got := cert.leaf.CRLDistributionPoints; len(got) != 1 || got[0] != want {
		t.Errorf("CRL distribution points %q; want [%s]", got, want)
	}
	plain := newTestEnv(t, nil)
	if got := plain.issue(ctx, plain.client(ctx), "nodp.example.com").leaf.CRLDistributionPoints; len(got) != 0 {
		t.Errorf("without crl_url the leaf names %q", got)
	}
	for _, bad := range []string{"https://crl.example.test/crl", "crl.example.test/crl", "http:///crl", "http://user:pw@crl.example.test/"} {
		cfg := ProfileConfig{Profile: "p", CRLURL: bad}
		cfg.SetDefaults()
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "crl_url") {
			t.Errorf("crl_url %q: %v; want an error naming crl_url", bad, err)
		}
	}
}

// jobSigner issues as the local CA but revokes at a backend, by job.
type jobSigner struct {
	*localca.Signer
	told chan struct{}
	down atomic.Bool
}

func (j *jobSigner) Revoke(context.Context, *x509.Certificate, *int) error {
	if j.down.Load() {
		return errors.New("backend down")
	}
	j.told <- struct{}{}
	return nil
}

func (j *jobSigner) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

func TestARevocationQueuedAtABackendIsConfirmedByAskingAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backend := &jobSigner{told: make(chan struct{}, 4)}
	e := newTestEnvWith(t, envOptions{
		opts: func(o *Options) { o.RevokeWait = 200 * time.Millisecond },
		wrap: func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
	})
	c := e.client(ctx)
	cert := e.issue(ctx, c, "backend.example.com")
	if err := e.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	raw := e.raw(c)
	revoke := func() rawResponse {
		return raw.post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 1}, jwsOpts{})
	}
	r := revoke()
	if r.status != http.StatusServiceUnavailable || r.problem == nil || r.problem.Type != vocab.ErrorServerInternal ||
		!strings.Contains(r.problem.Detail, "queued") || r.header.Get("Retry-After") == "" {
		t.Fatalf("with the runner stopped: %d %s (Retry-After %q); want 503 serverInternal queued with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	// Asking again follows the same job.
	revoke()
	job := func() store.Job {
		js, _ := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind})
		if len(js) != 1 || js[0].Key != cert.order {
			t.Fatalf("signer_revoke jobs %+v; want one keyed by the order", js)
		}
		return js[0]
	}
	job()
	unrevoked := func(when string) {
		if got, _ := e.db.CertificateOfOrder(ctx, cert.order); !got.RevokedAt.IsZero() {
			t.Fatalf("revoked %s", when)
		}
	}
	unrevoked("before the backend was told")

	// A runner runs the job against a failing backend: the certificate
	// stays unrevoked and the job waits to retry.
	backend.down.Store(true)
	profiles := staticProfiles{e.srv.Profile(): e.srv}
	handlers := append([]jobs.Handler{authority.ValidationJobs(profiles, e.db, e.srv.clock)},
		authority.RevocationJobHandlers(profiles, profiles.All, e.db, e.srv.clock, nil)...)
	runner, err := jobs.NewRunner(e.queue, handlers, jobs.RunnerOptions{Lanes: signingLanes(e.srv)})
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Stop() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if j := job(); j.Attempts >= 1 && j.Status == store.JobReady && strings.Contains(j.LastError, "backend down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never failed an attempt: %+v", job())
		}
	}
	unrevoked("although the backend failed")
	if r := revoke(); r.status != http.StatusServiceUnavailable {
		t.Errorf("asking while the backend fails: %d %s; want 503 queued", r.status, r.body)
	}

	// The backend is back; the operator skips the backoff; asking again
	// confirms.
	backend.down.Store(false)
	if _, err := e.queue.RetryNow(ctx, job().ID); err != nil {
		t.Fatal(err)
	}
	<-backend.told
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r = revoke(); r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("asking again: %d %s; want 200", r.status, r.body)
		}
	}
	if rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateRevoked, OrderID: cert.order}); len(rows) != 1 {
		t.Errorf("%d certificate_revoked rows; want 1", len(rows))
	}
	// Anyone else asking is told it is revoked already.
	other := e.client(ctx)
	e.issue(ctx, other, "backend.example.com")
	r = e.raw(other).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der)}, jwsOpts{})
	if r.status != http.StatusBadRequest || r.problem == nil || r.problem.Type != vocab.ErrorAlreadyRevoked {
		t.Errorf("another account: %d %s; want alreadyRevoked", r.status, r.body)
	}
	if n := len(backend.told); n != 0 {
		t.Errorf("the backend was told %d more times", n)
	}
}

// A CRL still valid is served from memory while the database cannot be
// read — a relying party is better served by it than by an error — and
// the same CRL, byte for byte.
func TestAValidCRLIsServedWhileTheDatabaseCannotBeRead(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		fake := clocktest.New(time.Now())
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = fake }})
		get := func() (int, []byte) {
			resp, err := e.ts.Client().Get(e.url("/crl"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			der, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, der
		}
		before := e.crl(func(*x509.RevocationList) bool { return true })
		e.runner.Stop()
		e.db.Close()
		fake.Advance(time.Minute) // past the recheck with the store
		status, der := get()
		if status != http.StatusOK || !bytes.Equal(der, before.Raw) {
			t.Fatalf("the CRL while the database is closed: %d, same bytes %v; want 200 and the CRL served before", status, bytes.Equal(der, before.Raw))
		}
	})
}
