package acmeproxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// refusingBackend issues as the local CA and revokes at a backend, by
// job, which refuses every revocation.
type refusingBackend struct {
	*localca.Signer
	asked atomic.Int32
}

func (r *refusingBackend) Revoke(context.Context, *x509.Certificate, *int) error {
	r.asked.Add(1)
	return fmt.Errorf("the CA says: not this account's certificate: %w", signer.ErrRevocationRefused)
}

func (r *refusingBackend) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

func TestARevocationTheBackendRefusesFailsAtOnceAndIsNotTriedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backend := &refusingBackend{}
	e := newTestEnvWith(t, envOptions{
		opts: func(o *Options) { o.RevokeWait = 10 * time.Second },
		wrap: func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
	})
	c := e.client(ctx)
	cert := e.issue(ctx, c, "refused-revoke.example.com")

	start := time.Now()
	r := e.raw(c).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 4}, jwsOpts{})
	// A 4xx: a client retries a 5xx, asking the backend again each time.
	if r.status != http.StatusForbidden || r.problem == nil || r.problem.Type != vocab.ErrorUnauthorized {
		t.Fatalf("revoke-cert: %d %s; want 403 unauthorized (the backend refused)", r.status, r.body)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the request waited %s; a refusal is final at the first attempt", waited)
	}
	js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind, Key: cert.order})
	if err != nil || len(js) != 1 {
		t.Fatalf("signer_revoke jobs: %+v (%v); want one", js, err)
	}
	if js[0].Status != store.JobFailed || js[0].Attempts != 1 {
		t.Errorf("the job is %s after %d attempts; want failed after 1", js[0].Status, js[0].Attempts)
	}
	if n := backend.asked.Load(); n != 1 {
		t.Errorf("the backend was asked %d times; want once", n)
	}
	if got, _ := e.db.CertificateOfOrder(ctx, cert.order); !got.RevokedAt.IsZero() {
		t.Error("the certificate is recorded revoked although its backend refused")
	}
	stored, err := e.db.CertificateOfOrder(ctx, cert.order)
	if err != nil {
		t.Fatal(err)
	}
	// Found by the certificate's serial too, beside its other rows.
	if rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationFailed, OrderID: cert.order, Serial: stored.Serial}); len(rows) != 1 {
		t.Errorf("%d revocation_failed rows of the order and serial; want 1", len(rows))
	}
}

// A revocation at a backend cannot be re-reasoned from here: asking again
// with another reason while it is under way, or once it is done, is
// refused as revoked already instead of answered as if the new reason had
// been applied.
func TestAskingAgainWithAnotherReasonIsNotAnsweredAsDoneWhenTheBackendRevokes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backend := &jobSigner{told: make(chan struct{}, 4)}
	backend.down.Store(true)
	e := newTestEnvWith(t, envOptions{
		opts: func(o *Options) { o.RevokeWait = 200 * time.Millisecond },
		wrap: func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
	})
	c := e.client(ctx)
	cert := e.issue(ctx, c, "reasons.example.com")
	raw := e.raw(c)
	revoke := func(reason int) rawResponse {
		return raw.post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": reason}, jwsOpts{})
	}

	if r := revoke(4); r.status != http.StatusServiceUnavailable {
		t.Fatalf("revoke with reason 4 while the backend is down: %d %s; want 503 queued", r.status, r.body)
	}
	if r := revoke(1); r.status != http.StatusBadRequest || r.problem == nil || r.problem.Type != vocab.ErrorAlreadyRevoked {
		t.Errorf("revoke with reason 1 while reason 4 is under way: %d %s; want alreadyRevoked", r.status, r.body)
	}

	backend.down.Store(false)
	js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind, Key: cert.order})
	if err != nil || len(js) != 1 {
		t.Fatalf("signer_revoke jobs: %+v (%v); want one", js, err)
	}
	if _, err := e.queue.RetryNow(ctx, js[0].ID); err != nil {
		t.Fatal(err)
	}
	<-backend.told
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r := revoke(4); r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("asking again with reason 4 never confirmed the revocation")
		}
	}
	if r := revoke(1); r.status != http.StatusBadRequest || r.problem == nil || r.problem.Type != vocab.ErrorAlreadyRevoked {
		t.Errorf("revoke with reason 1 once revoked with 4: %d %s; want alreadyRevoked", r.status, r.body)
	}
	if got, _ := e.db.CertificateOfOrder(ctx, cert.order); got.Reason == nil || *got.Reason != 4 {
		t.Errorf("the recorded reason is %v; want 4", got.Reason)
	}
}
