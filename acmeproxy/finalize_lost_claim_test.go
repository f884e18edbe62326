package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
)

// A finalize checks that its order is ready, reads the CSR, then claims
// the order. When something changes the order in between, the answer
// says what did: another finalize (orderNotReady, being finalized), its
// expiry (orderNotReady, invalid) or its account's deactivation (401, as
// any request of a deactivated account) — not always "being finalized".
func TestAFinalizeThatLosesItsClaimSaysWhatChangedTheOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		clk := clocktest.New(time.Now())
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = clk }})
		ctx := context.Background()
		au := e.srv.Authority()
		tests := []struct {
			name       string
			meanwhile  func(t *testing.T, alice *rawClient, o createdOrder, csr []byte)
			wantStatus int
			wantType   acme.ProblemType
			wantDetail string
		}{
			{"another finalize claimed it", func(t *testing.T, alice *rawClient, o createdOrder, csr []byte) {
				if r := alice.finalize(o, csr); r.status != http.StatusOK {
					t.Fatalf("the other finalize: %d %s", r.status, r.body)
				}
			}, http.StatusForbidden, acme.ErrorOrderNotReady, "already being finalized"},
			{"it expired", func(t *testing.T, _ *rawClient, o createdOrder, _ []byte) {
				exp, err := time.Parse(time.RFC3339, o.Expires)
				if err != nil {
					t.Fatal(err)
				}
				clk.Set(exp.Add(time.Second))
			}, http.StatusForbidden, acme.ErrorOrderNotReady, "is invalid"},
			{"its account was deactivated", func(t *testing.T, alice *rawClient, _ createdOrder, _ []byte) {
				if r := alice.post(alice.kid, map[string]any{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
					t.Fatalf("deactivation: %d %s", r.status, r.body)
				}
			}, http.StatusUnauthorized, acme.ErrorUnauthorized, "deactivated"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				clk.Set(time.Now())
				alice := e.rawClient()
				alice.register()
				o := alice.readyOrder("lost-claim.example.com")
				csr := newCSR(t, newKey(t), "", []string{"lost-claim.example.com"}, nil)
				acct, err := e.db.GetAccount(ctx, e.srv.Profile(), path.Base(alice.kid))
				if err != nil {
					t.Fatal(err)
				}
				_, err = au.Finalize(ctx, acct, path.Base(o.url), func() ([]byte, error) {
					tc.meanwhile(t, alice, o, csr)
					return csr, nil
				}, authority.Client{IP: "127.0.0.1"})
				p, ok := problem.As(err)
				if !ok || p.Status != tc.wantStatus || p.Type != tc.wantType || !strings.Contains(p.Detail, tc.wantDetail) {
					t.Fatalf("got %v; want a %d %s problem saying %q", err, tc.wantStatus, tc.wantType, tc.wantDetail)
				}
			})
		}
	})
}
