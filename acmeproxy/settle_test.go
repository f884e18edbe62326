package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"sync"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// laterSigner answers every issue Pending and keeps the request, as a
// signer that finishes its orders later (the relay) does; the test then
// settles them through the server's Settler methods.
type laterSigner struct {
	*sjSigner
	mu   sync.Mutex
	reqs []signer.IssueRequest
}

func (s *laterSigner) Issue(_ context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	return signer.IssueOutcome{Pending: true}, nil
}

func TestAnOrderASignerSettlesLaterIsAuditedWithTheClientThatFinalizedIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		var local *localca.Signer
		later := &laterSigner{sjSigner: &sjSigner{}}
		e := newTestEnvWith(t, envOptions{wrap: func(s *localca.Signer) signer.Signer { local = s; return later }})
		const ua = "settle-later-client/1.0"

		for _, tc := range []struct {
			name   string
			settle func(t *testing.T, orderID string, req signer.IssueRequest) error
			event  string
		}{
			{"issued", func(t *testing.T, orderID string, req signer.IssueRequest) error {
				out, err := local.Issue(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return e.srv.Authority().Issued(ctx, orderID, out.Chain)
			}, acme.EventCertificateIssued},
			{"failed", func(t *testing.T, orderID string, _ signer.IssueRequest) error {
				return e.srv.Authority().Failed(ctx, orderID, "the upstream CA refused")
			}, acme.EventCertificateIssueFailed},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := e.rawClient()
				c.register()
				name := tc.name + ".later.example.com"
				o := c.readyOrder(name)
				r := c.postAs(ua, o.Finalize, marshal(t, map[string]string{"csr": b64(newCSR(t, newKey(t), "", []string{name}, nil))}), jwsOpts{})
				if r.status != http.StatusOK {
					t.Fatalf("finalize: %d %s", r.status, r.body)
				}
				orderID := path.Base(o.url)
				later.mu.Lock()
				req := later.reqs[len(later.reqs)-1]
				later.mu.Unlock()
				if req.OrderID != orderID {
					t.Fatalf("the signer was asked for order %s, want %s", req.OrderID, orderID)
				}
				if err := tc.settle(t, orderID, req); err != nil {
					t.Fatal(err)
				}
				evs, err := e.db.SearchAudit(ctx, store.AuditFilter{OrderID: orderID, Event: tc.event})
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) != 1 {
					t.Fatalf("%d %s rows for the order, want 1", len(evs), tc.event)
				}
				if evs[0].ClientIP != "127.0.0.1" || evs[0].UserAgent != ua {
					t.Errorf("audit row names client %q with user agent %q; want the finalizing client 127.0.0.1, %q",
						evs[0].ClientIP, evs[0].UserAgent, ua)
				}
			})
		}
	})
}
