package acmeproxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
)

// A certificate past its notAfter is not revoked, by its client or by an
// operator: no CRL issued from then on would list it, so a revocation
// answered with success would be a promise nothing keeps. The refusal
// says so, and nothing is recorded.
func TestAnExpiredCertificateIsNotRevokedAndTheRefusalSaysItExpired(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := clocktest.New(time.Now())
	e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = clk }})
	owner := e.client(ctx)
	cert := e.issue(ctx, owner, "expired.example.com")
	clk.Advance(cert.leaf.NotAfter.Sub(clk.Now()) + time.Minute)

	t.Run("its client is refused with unauthorized, naming the expiry", func(t *testing.T) {
		res := e.raw(owner).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 1}, jwsOpts{})
		if res.status != http.StatusForbidden || res.problem == nil || res.problem.Type != vocab.ErrorUnauthorized ||
			!strings.Contains(res.problem.Detail, "expired") {
			t.Fatalf("revoke-cert of an expired certificate: %d %+v; want 403 unauthorized saying it expired", res.status, res.problem)
		}
	})
	t.Run("an operator is refused with a conflict", func(t *testing.T) {
		op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
		_, err := op.RevokeOrder(ctx, cert.order, nil, authority.Actor{Kind: authority.ActorAdmin, ID: "test"})
		if !errors.Is(err, operator.ErrConflict) || !errors.Is(err, authority.ErrCertificateExpired) {
			t.Fatalf("operator revocation of an expired certificate: %v; want a conflict saying it expired", err)
		}
	})
	stored, err := e.db.CertificateOfOrder(ctx, cert.order)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.RevokedAt.IsZero() {
		t.Errorf("the refused revocations recorded one at %v", stored.RevokedAt)
	}
}
