package acmeproxy

import (
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"

	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// refusalMetrics counts RevocationRefused by profile and reason.
type refusalMetrics struct {
	authority.NopMetrics
	mu sync.Mutex
	n  map[string]int
}

func (m *refusalMetrics) RevocationRefused(profile, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[profile+"/"+reason]++
}

func (m *refusalMetrics) count(profile, reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[profile+"/"+reason]
}

// postAs sends a signed request with the given User-Agent.
func (c *rawClient) postAs(userAgent, target string, payload []byte, o jwsOpts) rawResponse {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(c.sign(target, payload, o)))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/jose+json")
	req.Header.Set("User-Agent", userAgent)
	resp, err := c.e.ts.Client().Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), problem.ContentType) {
		out.problem = &problem.Problem{}
		_ = json.Unmarshal(b, out.problem)
	}
	return out
}

func TestRefusalsOfRequestersNoOneKnowsWriteOneSummaryRowPerSourceAndInterval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clk := clocktest.New(time.Now())
	m := &refusalMetrics{}
	e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock, o.Metrics = clk, m }})
	owner := e.client(ctx)
	cert := e.issue(ctx, owner, "kept.example.com")
	// What a Caddy in front forwards on HTTP/2: about 16 KB of headers.
	bigUA := "flood/1.0 " + strings.Repeat("A", 16<<10)
	rows := func(event string) []store.AuditEvent {
		return auditRows(t, e.db, store.AuditFilter{Event: event, Limit: 1000})
	}
	before := len(rows(vocab.EventRevocationRefused))

	// 200 refusals from one address: 150 throwaway keys signing a payload
	// that is not JSON, 50 signing a real certificate with another key.
	for i := range 200 {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		stranger := e.rawClient()
		payload := []byte("not json")
		wantType := vocab.ErrorMalformed
		if i%4 == 3 {
			payload, _ = json.Marshal(map[string]any{"certificate": b64(cert.der)})
			wantType = vocab.ErrorUnauthorized
		}
		r := stranger.postAs(bigUA, e.url("/revoke-cert"), payload, jwsOpts{embedJWK: true, key: key})
		if r.problem == nil || r.problem.Type != wantType {
			t.Fatalf("refusal %d: %d %s; want %s", i, r.status, r.body, wantType)
		}
	}
	if n := len(rows(vocab.EventRevocationRefused)) - before; n != 0 {
		t.Errorf("%d refusal rows written for requests no one could be named for; want none", n)
	}
	if got := rows(vocab.EventRevocationRefusals); len(got) != 0 {
		t.Errorf("a summary before its interval ended: %+v", got)
	}
	if m.count("test", authority.RefusalMalformed) != 150 || m.count("test", authority.RefusalNotAuthorized) != 50 {
		t.Errorf("counted %v; want 150 malformed and 50 not_authorized", m.n)
	}

	clk.Advance(authority.RefusalInterval - time.Second)
	e.srv.Authority().FlushRefusals(ctx, false)
	if got := rows(vocab.EventRevocationRefusals); len(got) != 0 {
		t.Fatalf("a summary %s into its interval: %+v", authority.RefusalInterval-time.Second, got)
	}
	clk.Advance(time.Second)
	e.srv.Authority().FlushRefusals(ctx, false)
	e.srv.Authority().FlushRefusals(ctx, false)
	sum := rows(vocab.EventRevocationRefusals)
	if len(sum) != 1 {
		t.Fatalf("%d summary rows for one source's interval; want 1: %+v", len(sum), sum)
	}
	s := sum[0]
	if s.ClientIP != "127.0.0.1" || s.Outcome != authority.OutcomeRefused || s.Profile != "test" || s.ActorKind != authority.ActorSystem ||
		!strings.HasPrefix(s.Detail, "200 refused revocation requests from 127.0.0.1 in the 10m0s from ") ||
		s.Reason != "malformed=150 not_authorized=50" || s.UserAgent != "" {
		t.Errorf("summary row %+v", s)
	}

	// The next interval's refusal is counted anew; once that interval is
	// over, the next refusal writes its summary without waiting for a
	// flush.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	e.rawClient().postAs(bigUA, e.url("/revoke-cert"), []byte("{"), jwsOpts{embedJWK: true, key: key})
	clk.Advance(authority.RefusalInterval)
	e.rawClient().postAs(bigUA, e.url("/revoke-cert"), []byte("{"), jwsOpts{embedJWK: true, key: key})
	sum = rows(vocab.EventRevocationRefusals)
	if len(sum) != 2 || !strings.HasPrefix(sum[0].Detail, "1 refused revocation requests from 127.0.0.1") {
		t.Fatalf("after the second interval: %+v; want a second summary of 1 refusal", sum)
	}
	// The last refusal's interval is still open: a final flush writes it.
	e.srv.Authority().FlushRefusals(ctx, true)
	if sum = rows(vocab.EventRevocationRefusals); len(sum) != 3 {
		t.Errorf("a final flush left the open interval unwritten: %d summaries", len(sum))
	}

	// A requester who is known still gets a row of its own per refusal,
	// its user agent cut to the bound: the owner's account with a reason
	// that is none, and the certificate's own key on a certificate
	// already revoked.
	own := e.raw(owner)
	p, _ := json.Marshal(map[string]any{"certificate": b64(cert.der), "reason": 7})
	if r := own.postAs(bigUA, e.url("/revoke-cert"), p, jwsOpts{}); r.problem == nil || r.problem.Type != vocab.ErrorBadRevocationReason {
		t.Fatalf("reason 7 by the owner: %d %s", r.status, r.body)
	}
	if err := owner.RevokeCert(ctx, nil, cert.der, acme.CRLReasonSuperseded); err != nil {
		t.Fatal(err)
	}
	p, _ = json.Marshal(map[string]any{"certificate": b64(cert.der)})
	if r := own.postAs(bigUA, e.url("/revoke-cert"), p, jwsOpts{embedJWK: true, key: cert.key}); r.problem == nil || r.problem.Type != vocab.ErrorAlreadyRevoked {
		t.Fatalf("the certificate's key, again: %d %s", r.status, r.body)
	}
	got := rows(vocab.EventRevocationRefused)
	if len(got)-before != 2 {
		t.Fatalf("%d refusal rows for two known requesters; want 2", len(got)-before)
	}
	for i, r := range got[:2] {
		if r.OrderID != cert.order || len(r.UserAgent) > store.AuditFieldMax || !strings.HasSuffix(r.UserAgent, store.CutMark) ||
			!strings.HasPrefix(r.UserAgent, "flood/1.0 AAAA") {
			t.Errorf("row %d: order %q, user agent of %d bytes %q", i, r.OrderID, len(r.UserAgent), r.UserAgent)
		}
	}
	if got[0].ActorKind != authority.ActorCertificateKey || got[1].ActorKind != authority.ActorAccount {
		t.Errorf("actors %s, %s; want the certificate's key, then the account", got[0].ActorKind, got[1].ActorKind)
	}
	if m.count("test", authority.RefusalBadReason) != 1 || m.count("test", authority.RefusalAlreadyRevoked) != 1 {
		t.Errorf("counted %v; want the known refusals too", m.n)
	}

	// A deactivated account's key is refused at the JWS step, as on every
	// route (RFC 8555 §7.3.6), before revoke-cert looks at the
	// certificate: no row of its own, and no revocation refusal counted.
	gone := e.rawClient()
	gone.register()
	if r := gone.post(gone.kid, map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
		t.Fatalf("deactivate: %d %s", r.status, r.body)
	}
	if r := gone.post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der)}, jwsOpts{}); r.problem == nil ||
		r.problem.Type != vocab.ErrorUnauthorized || r.status != http.StatusUnauthorized {
		t.Fatalf("a deactivated stranger: %d %s", r.status, r.body)
	}
	if n := len(rows(vocab.EventRevocationRefused)) - before; n != 2 {
		t.Errorf("a deactivated stranger's refusal wrote a row of its own (%d rows; want still 2)", n)
	}
	if m.count("test", authority.RefusalNotAuthorized) != 50 {
		t.Errorf("counted %v; want the deactivated stranger's request not among revoke-cert's refusals", m.n)
	}
}

func TestAQueuedRevocationCarriesTheClientsUserAgentCutToTheBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backend := &jobSigner{told: make(chan struct{}, 1)}
	e := newTestEnvWith(t, envOptions{
		opts: func(o *Options) { o.RevokeWait = 100 * time.Millisecond },
		wrap: func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
	})
	c := e.client(ctx)
	cert := e.issue(ctx, c, "queued.example.com")
	if err := e.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	ua := "lego/5 " + strings.Repeat("x", 16<<10)
	p, _ := json.Marshal(map[string]any{"certificate": b64(cert.der)})
	if r := e.raw(c).postAs(ua, e.url("/revoke-cert"), p, jwsOpts{}); r.status != http.StatusServiceUnavailable {
		t.Fatalf("with the runner stopped: %d %s; want 503 queued", r.status, r.body)
	}
	js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind})
	if err != nil || len(js) != 1 {
		t.Fatalf("signer_revoke jobs %v, %v; want one", js, err)
	}
	var payload struct {
		UserAgent string `json:"user_agent"`
	}
	if err := json.Unmarshal(js[0].Payload, &payload); err != nil {
		t.Fatal(err)
	}
	if len(payload.UserAgent) > store.AuditFieldMax || !strings.HasPrefix(payload.UserAgent, "lego/5 xxx") ||
		!strings.HasSuffix(payload.UserAgent, store.CutMark) {
		t.Errorf("the job stores a user agent of %d bytes: %q", len(payload.UserAgent), payload.UserAgent)
	}
}

func TestTheAuditSweepDeletesOnlyRowsPastTheRetentionAndRecordsItself(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	retention := 90 * 24 * time.Hour
	for i, at := range []time.Time{now.Add(-retention - time.Hour), now.Add(-retention - time.Millisecond), now.Add(-retention),
		now.Add(-time.Hour)} {
		if err := e.db.InsertAudit(ctx, store.AuditEvent{At: at, Event: vocab.EventCertificateIssued, Outcome: authority.OutcomeSuccess,
			OrderID: fmt.Sprint("o", i)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := authority.SweepAudit(ctx, e.db, retention, now)
	if err != nil || n != 2 {
		t.Fatalf("SweepAudit: %d, %v; want the 2 rows older than %s", n, err, retention)
	}
	left := auditRows(t, e.db, store.AuditFilter{Limit: 1000})
	var orders []string
	var sweeps []store.AuditEvent
	for _, r := range left {
		if r.Event == vocab.EventAuditPruned {
			sweeps = append(sweeps, r)
		} else {
			orders = append(orders, r.OrderID)
		}
	}
	if fmt.Sprint(orders) != "[o3 o2]" {
		t.Errorf("rows left %v; want o3 and o2 (the one exactly at the cutoff stays)", orders)
	}
	if len(sweeps) != 1 || sweeps[0].ActorKind != authority.ActorSystem ||
		sweeps[0].Detail != "the retention sweep deleted 2 audit rows older than 2026-03-03T00:00:00Z (audit_retention 90d)" {
		t.Errorf("the sweep's rows: %+v", sweeps)
	}
	// A sweep with nothing to delete writes nothing.
	if n, err := authority.SweepAudit(ctx, e.db, retention, now); err != nil || n != 0 {
		t.Errorf("a second sweep: %d, %v", n, err)
	}
	if again := auditRows(t, e.db, store.AuditFilter{Limit: 1000}); len(again) != len(left) {
		t.Errorf("a sweep that deleted nothing wrote a row: %d rows, then %d", len(left), len(again))
	}
}

func TestAnOperatorPruneRefusesAFutureCutoffAndRecordsWhoPruned(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
	old := time.Now().Add(-48 * time.Hour)
	for _, at := range []time.Time{old, old.Add(time.Hour), time.Now()} {
		if err := e.db.InsertAudit(ctx, store.AuditEvent{At: at, Event: vocab.EventCertificateIssued, Outcome: authority.OutcomeSuccess}); err != nil {
			t.Fatal(err)
		}
	}
	for name, before := range map[string]time.Time{"no cutoff": {}, "a cutoff in the future": time.Now().Add(time.Hour)} {
		if _, err := op.PruneAudit(ctx, before, authority.Actor{Kind: authority.ActorAdmin, ID: "ops"}); !errors.Is(err, operator.ErrInvalid) {
			t.Errorf("%s: %v; want operator.ErrInvalid", name, err)
		}
	}
	cutoff := old.Add(30 * time.Minute)
	v, err := op.PruneAudit(ctx, cutoff, authority.Actor{Kind: authority.ActorCLI, ID: "alice"})
	if err != nil || v.Deleted != 1 || !v.Before.Equal(cutoff) {
		t.Fatalf("PruneAudit: %+v, %v; want 1 deleted", v, err)
	}
	rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventAuditPruned})
	if len(rows) != 1 || rows[0].ActorKind != authority.ActorCLI || rows[0].ActorID != "alice" ||
		rows[0].Detail != "deleted 1 audit rows older than "+cutoff.UTC().Format(time.RFC3339) {
		t.Errorf("the prune's row: %+v", rows)
	}
}

func TestANotificationCarriesTheAuditRowsBoundedStrings(t *testing.T) {
	dst := notify.Destination{Type: notify.TypeWebhook, URL: "https://hooks.example.com/acme"}
	e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Notify = []notify.Destination{dst} }})
	detail := strings.Repeat("upstream said: no. ", 1000)
	jobs := e.srv.Authority().AuditNotifyJobs(store.AuditEvent{At: time.Now(), Event: vocab.EventCertificateIssueFailed, Outcome: authority.OutcomeFailure,
		Profile: "test", OrderID: "o1", Reason: strings.Repeat("r", 5000), Detail: detail})
	if len(jobs) != 1 {
		t.Fatalf("%d notification jobs; want 1", len(jobs))
	}
	var p struct {
		Event notify.Event `json:"event"`
	}
	if err := json.Unmarshal(jobs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Event.Detail) > store.AuditDetailMax || !strings.HasSuffix(p.Event.Detail, store.CutMark) ||
		len(p.Event.Reason) > store.AuditFieldMax || p.Event.Order != "o1" {
		t.Errorf("the notification carries a detail of %d bytes and a reason of %d; want them as the row stores them",
			len(p.Event.Detail), len(p.Event.Reason))
	}
}
