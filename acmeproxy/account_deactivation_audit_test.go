package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A client deactivating its own account (RFC 8555 §7.3.6) is audited as
// an operator's deactivation is: one account_deactivated row, by the
// account itself, with the client's address and user agent. A repeated
// deactivation, refused, adds none; another account has none.
func TestAnAccountsOwnDeactivationIsAnAuditRowByTheAccount(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e := newTestEnv(t, nil)
		alice, bob := e.rawClient(), e.rawClient()
		alice.register()
		bob.register()
		id := path.Base(alice.kid)
		if r := alice.post(alice.kid, map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("deactivation: %d %s", r.status, r.body)
		}
		wantProblem(t, alice.post(alice.kid, map[string]string{"status": "deactivated"}, jwsOpts{}), http.StatusUnauthorized, vocab.ErrorUnauthorized)

		rows := func(account string) []store.AuditEvent {
			t.Helper()
			evs, err := e.db.SearchAudit(ctx, store.AuditFilter{Event: vocab.EventAccountDeactivated, AccountID: account})
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		evs := rows(id)
		if len(evs) != 1 {
			t.Fatalf("%d account_deactivated rows for the account, want 1: %+v", len(evs), evs)
		}
		ev := evs[0]
		if ev.Outcome != authority.OutcomeSuccess || ev.Profile != e.srv.Profile() ||
			ev.ActorKind != authority.ActorAccount || ev.ActorID != id || ev.AccountID != id {
			t.Errorf("row %+v; want a success of profile %s by account %s about itself", ev, e.srv.Profile(), id)
		}
		if ev.ClientIP != "127.0.0.1" || ev.UserAgent != "Go-http-client/1.1" {
			t.Errorf("row from %q with user agent %q; want the client's 127.0.0.1 and Go-http-client/1.1", ev.ClientIP, ev.UserAgent)
		}
		if other := rows(path.Base(bob.kid)); len(other) != 0 {
			t.Errorf("another account has account_deactivated rows: %+v", other)
		}
	})
}
