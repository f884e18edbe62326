package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// issueMetrics counts IssueFailed and IssueDeferred by reason class, and
// Issued.
type issueMetrics struct {
	authority.NopMetrics
	mu       sync.Mutex
	failed   map[string]int
	deferred map[string]int
	issued   int
}

func (m *issueMetrics) Issued(string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.issued++
}

func (m *issueMetrics) IssueDeferred(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deferred == nil {
		m.deferred = map[string]int{}
	}
	m.deferred[reason]++
}

func (m *issueMetrics) IssueFailed(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed == nil {
		m.failed = map[string]int{}
	}
	m.failed[reason]++
}

func (m *issueMetrics) failures() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.failed {
		out[k] = v
	}
	return out
}

// deferringSigner is the local CA, answering "not now, try later" (a
// signer.Error of err's kind, or err itself when untyped) to its first
// call.
type deferringSigner struct {
	*localca.Signer
	err  error
	once sync.Once
}

func (d *deferringSigner) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	var err error
	d.once.Do(func() { err = d.err })
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	return d.Signer.Issue(ctx, req)
}

// An operator alerts on certificates_failed_total: a finalize whose
// signer answers "not now" leaves the order processing, and the resume
// sweep signs it later. That is no failed issuance: it is counted as
// deferred, once, and the certificate as issued, once — never as failed.
func TestAnIssuanceTheSignerDefersAndLaterSignsIsCountedAsDeferredNotFailed(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		reason string
	}{
		{"ok/the signer is unavailable, try later", &signer.Error{Kind: signer.KindUnavailable, Detail: "the backend is busy"}, "signer_unavailable"},
		{"ok/a fault on our side", errors.New("the HSM is unplugged"), "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			fake := clocktest.New(time.Now())
			m := &issueMetrics{}
			sg := &deferringSigner{err: tc.err}
			e := newTestEnvWith(t, envOptions{
				wrap: func(l *localca.Signer) signer.Signer { sg.Signer = l; return sg },
				opts: func(o *Options) { o.Clock, o.Metrics = fake, m },
			})
			c, o, csr := readyOrder(t, ctx, e, "deferred.example.com")
			if r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{}); r.status != http.StatusOK {
				t.Fatalf("finalize: %d %s; want 200 with the order processing", r.status, r.body)
			}
			fake.Advance(authority.StuckAfter + time.Minute)
			if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 1 {
				t.Fatalf("resume: %d %v; want the order resumed", n, err)
			}
			if stored, err := e.db.GetOrder(ctx, e.srv.Profile(), path.Base(o.URI)); err != nil || stored.Status != "valid" {
				t.Fatalf("the order after the resume sweep is %s %v; want valid", stored.Status, err)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.failed) != 0 {
				t.Errorf("failed issuances counted %v for an issuance that succeeded; want none", m.failed)
			}
			if len(m.deferred) != 1 || m.deferred[tc.reason] != 1 {
				t.Errorf("deferred issuances counted %v; want one, %s", m.deferred, tc.reason)
			}
			if m.issued != 1 {
				t.Errorf("%d issuances counted; want 1", m.issued)
			}
		})
	}
}

// An operator alerts on certificates_failed_total: a delegated order that
// fails because the worker's signer kept failing until its job was
// abandoned is one failed issuance, counted once (as "abandoned", as a
// relay's or a script's abandoned order is), by the instance that failed
// it.
func TestADelegatedOrderAbandonedAfterItsSignerKeptFailingIsCountedAsOneFailedIssuance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath, ca, front := startFrontEnd(t)
	m := &issueMetrics{}
	newTestEnvWith(t, envOptions{dbPath: dbPath, ca: ca,
		wrap: func(l *localca.Signer) signer.Signer { return failingSigner{l} },
		opts: func(o *Options) { o.Metrics = m },
		runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond,
			Lanes: []string{signer.SigningLane("test"), signer.AnySignerLane}},
		profileHandlers: issueHandlers,
	})
	c := front.client(ctx)
	o := front.authorizedOrder(ctx, c, "failing.example.com")
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "", []string{"failing.example.com"}, nil), true); err == nil {
		t.Fatal("the order completed although its signer always fails")
	}
	id := path.Base(o.URI)
	waitUntil(t, "the signer_issue job's retirement", func() bool {
		js, _ := front.queue.List(ctx, store.JobFilter{Kind: signer.IssueKind, Key: id})
		return len(js) == 1 && js[0].Status == store.JobFailed
	})
	if got := m.failures(); len(got) != 1 || got["abandoned"] != 1 {
		t.Fatalf("failed issuances counted %v; want one, abandoned", got)
	}
}

// fillingRefuser refuses every CSR (a verdict), and fills the database
// first on its first call: the order's failure then cannot be written.
type fillingRefuser struct {
	*localca.Signer
	once sync.Once
	fill func()
}

func (f *fillingRefuser) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	f.once.Do(f.fill)
	return signer.IssueOutcome{}, &signer.Error{Kind: signer.KindBadCSR, Detail: "this CA does not sign such keys"}
}

// A signer's verdict whose failed order cannot be written (the database
// full) leaves the order processing: it is not counted or logged as a
// failed issuance then, only when the resume sweep records the failure —
// one order, one certificates_failed_total and one
// certificate_issue_failed line.
func TestAFailedIssuanceIsCountedAndLoggedOnceWhenItsFirstRecordingFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbPath := filepath.Join(t.TempDir(), "acme.db")
	empty, err := store.OpenSQLite(ctx, dbPath, store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty.Close()
	fi, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	fake := clocktest.New(time.Now())
	m := &issueMetrics{}
	var db *store.DB
	sg := &fillingRefuser{fill: func() {
		// Rows of shrinking size fill the last pages' corners too.
		for _, size := range []int{2000, 200, 1} {
			for db.InsertAudit(context.Background(), store.AuditEvent{At: time.Now(), Event: "filler", Outcome: "success",
				Detail: strings.Repeat("x", size)}) == nil {
			}
		}
	}}
	e := newTestEnvWith(t, envOptions{dbPath: dbPath, sqlite: store.SQLiteOptions{MaxPages: int(fi.Size()/4096) + 64},
		wrap: func(l *localca.Signer) signer.Signer { sg.Signer = l; return sg },
		opts: func(o *Options) { o.Logger, o.Clock, o.Metrics = zap.New(core), fake, m },
	})
	db = e.db
	c, o, csr := readyOrder(t, ctx, e, "refused.example.com")
	e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
	id := path.Base(o.URI)
	if stored, err := e.db.GetOrder(ctx, e.srv.Profile(), id); err != nil || stored.Status != "processing" {
		t.Fatalf("the order whose failure could not be written is %s %v; want processing", stored.Status, err)
	}
	if logs.FilterField(zap.String("event", "order_fail_record_failed")).Len() != 1 {
		t.Fatalf("no order_fail_record_failed line: the test did not make the failure's write fail")
	}

	if _, err := e.db.PruneAudit(ctx, time.Now().Add(time.Hour), 10000, nil, func(int64, error) (store.AuditEvent, bool) { return store.AuditEvent{}, false }); err != nil {
		t.Fatalf("making room: %v", err)
	}
	fake.Advance(authority.StuckAfter + time.Minute)
	if _, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if stored, err := e.db.GetOrder(ctx, e.srv.Profile(), id); err != nil || stored.Status != "invalid" {
		t.Fatalf("the order after the resume sweep is %s %v; want invalid", stored.Status, err)
	}
	if got := m.failures(); len(got) != 1 || got["bad_csr"] != 1 {
		t.Errorf("failed issuances counted %v; want one, bad_csr", got)
	}
	if n := logs.FilterField(zap.String("event", vocab.EventCertificateIssueFailed)).Len(); n != 1 {
		t.Errorf("%d certificate_issue_failed lines for one failed order; want 1", n)
	}
}

// An order that the resume sweep fails because the reloaded config now
// refuses it — its name denied, its certificate profile gone — is a
// failed issuance like any other: audited, logged and counted once.
func TestAnOrderTheResumeSweepFailsByTheReloadedConfigIsCountedAsAFailedIssuance(t *testing.T) {
	cases := []struct {
		name   string
		before func(*ProfileConfig)
		after  func(*ProfileConfig)
		want   string
	}{
		{"ok/its name is denied now", certProfiles, func(c *ProfileConfig) {
			certProfiles(c)
			c.Deny = &IdentifierPolicy{Domains: []string{"soon-denied.example.com"}}
		}, "rejected_identifier"},
		{"ok/its certificate profile is no longer offered", certProfiles, func(c *ProfileConfig) {
			certProfiles(c)
			delete(c.CertificateProfiles, "client")
		}, "invalid_profile"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dbPath := filepath.Join(t.TempDir(), "acme.db")
			before := newTestEnvWith(t, envOptions{dbPath: dbPath, mutate: tc.before})
			c := before.rawClient()
			c.register()
			r := c.post(before.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("soon-denied.example.com")}, "profile": "client"}, jwsOpts{})
			if r.status != http.StatusCreated {
				t.Fatalf("new-order: %d %s", r.status, r.body)
			}
			o := createdOrder{url: r.header.Get("Location"), orderJSON: decodeAs[orderJSON](t, r)}
			for _, az := range o.Authorizations {
				c.answerHTTP01(az, "")
				c.await(az, "valid")
			}
			c.await(o.url, "ready")
			id := path.Base(o.url)
			// The finalize that claimed the order died before signing.
			csr := newCSR(t, newKey(t), "", []string{"soon-denied.example.com"}, nil)
			if won, err := before.db.ClaimOrderForIssue(ctx, id, csr, store.OrderClient{}, "", time.Now().Add(-10*time.Minute)); err != nil || !won {
				t.Fatalf("claim: %v %v", won, err)
			}
			m := &issueMetrics{}
			after := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: before.ca, mutate: tc.after, opts: func(o *Options) { o.Metrics = m }})
			if _, err := after.srv.Authority().ResumeStuckOrders(ctx); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if stored, err := after.db.GetOrder(ctx, after.srv.Profile(), id); err != nil || stored.Status != "invalid" {
				t.Fatalf("resumed order %s %v; want invalid", stored.Status, err)
			}
			if got := m.failures(); len(got) != 1 || got[tc.want] != 1 {
				t.Errorf("failed issuances counted %v; want one, %s", got, tc.want)
			}
		})
	}
}
