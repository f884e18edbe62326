package acmeproxy

import (
	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"

	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// faultySigner is the local CA, failing on our side (an untyped error, as
// a chain and key read apart during a renewal give) while faults > 0.
type faultySigner struct {
	*localca.Signer
	faults atomic.Int32
}

func (f *faultySigner) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	if f.faults.Add(-1) >= 0 {
		return signer.IssueOutcome{}, errors.New("localca: issuing CA: the key does not match certificate \"intermediate\"")
	}
	return f.Signer.Issue(ctx, req)
}

// readyOrder has a new account of e order names and prove them, and
// returns the client, the order and a CSR for it.
func readyOrder(t *testing.T, ctx context.Context, e *testEnv, names ...string) (*acme.Client, *acme.Order, []byte) {
	t.Helper()
	c := e.client(ctx)
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs(names...))
	if err != nil {
		t.Fatal(err)
	}
	o = e.authorize(ctx, c, o)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	return c, o, newCSR(t, key, "", names, nil)
}

func TestAFaultOnOurSideAtFinalizeLeavesTheOrderProcessingAndTheResumeSweepIssuesIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := clocktest.New(time.Now())
	sg := &faultySigner{}
	sg.faults.Store(1)
	e := newTestEnvWith(t, envOptions{
		wrap: func(l *localca.Signer) signer.Signer { sg.Signer = l; return sg },
		opts: func(o *Options) { o.Clock = fake },
	})
	c, o, csr := readyOrder(t, ctx, e, "renewing-ca.example.com")

	r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
	var got struct{ Status string }
	_ = json.Unmarshal(r.body, &got)
	if r.status != http.StatusOK || got.Status != "processing" || r.header.Get("Retry-After") == "" {
		t.Fatalf("finalize during a fault: %d %s (Retry-After %q); want 200, a processing order and Retry-After",
			r.status, r.body, r.header.Get("Retry-After"))
	}
	id := path.Base(o.URI)
	stored, err := e.db.GetOrder(ctx, e.srv.Profile(), id)
	if err != nil || stored.Status != "processing" {
		t.Fatalf("stored order %s %v; want processing, not failed for good", stored.Status, err)
	}
	if rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateIssueFailed, OrderID: id}); len(rows) != 0 {
		t.Errorf("a fault on our side was audited as a failed issuance: %+v", rows)
	}

	fake.Advance(authority.StuckAfter + time.Minute)
	if n, err := e.srv.Authority().ResumeStuckOrders(ctx); err != nil || n != 1 {
		t.Fatalf("resume: %d %v; want the order resumed", n, err)
	}
	after, err := c.GetOrder(ctx, o.URI)
	if err != nil || after.Status != acme.StatusValid || after.CertURL == "" {
		t.Fatalf("order after the fault cleared: %+v %v; want valid with a certificate", after, err)
	}
}

func TestAVerdictOfTheSignerStillFailsTheOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnvWith(t, envOptions{wrap: func(l *localca.Signer) signer.Signer {
		return refusingSigner{Signer: l}
	}})
	c, o, csr := readyOrder(t, ctx, e, "refused.example.com")
	r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
	if r.problem == nil || r.problem.Type != "urn:ietf:params:acme:error:badCSR" {
		t.Fatalf("finalize refused by the signer: %d %s; want badCSR", r.status, r.body)
	}
	stored, err := e.db.GetOrder(ctx, e.srv.Profile(), path.Base(o.URI))
	if err != nil || stored.Status != "invalid" {
		t.Fatalf("stored order %s %v; want invalid", stored.Status, err)
	}
}

type refusingSigner struct{ *localca.Signer }

func (refusingSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{}, &signer.Error{Kind: signer.KindBadCSR, Detail: "this CA does not sign such keys"}
}

func TestAnOrderResumedAfterAReloadIsCheckedAgainstTheCurrentPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbPath := t.TempDir() + "/acme.db"
	before := newTestEnvWith(t, envOptions{dbPath: dbPath})
	_, o, csr := readyOrder(t, ctx, before, "soon-denied.example.com")
	id := path.Base(o.URI)
	// The finalize that claimed the order died before signing.
	if won, err := before.db.ClaimOrderForIssue(ctx, id, csr, store.OrderClient{}, "", time.Now().Add(-10*time.Minute)); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	// The reloaded config denies the name.
	after := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: before.ca, mutate: func(c *ProfileConfig) {
		c.Deny = &IdentifierPolicy{Domains: []string{"soon-denied.example.com"}}
	}})
	if _, err := after.srv.Authority().ResumeStuckOrders(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	stored, err := after.db.GetOrder(ctx, after.srv.Profile(), id)
	if err != nil || stored.Status != "invalid" || stored.CertificateID != "" {
		t.Fatalf("resumed order %s certificate %q %v; want invalid, with no certificate", stored.Status, stored.CertificateID, err)
	}
	if rows := auditRows(t, after.db, store.AuditFilter{Event: vocab.EventCertificateIssueFailed, OrderID: id}); len(rows) != 1 {
		t.Errorf("%d certificate_issue_failed rows; want 1", len(rows))
	}
}
