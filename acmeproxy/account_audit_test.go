package acmeproxy

import (
	"net/http"
	"strings"
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A new account is in the audit trail, by the account, from the client's
// address, written with the account; a new-account that finds the key's
// account (200) adds no row.
func TestANewAccountIsAuditedOnceAndFindingItAgainIsNot(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		c := e.rawClient()
		c.register()
		id := c.kid[strings.LastIndex(c.kid, "/")+1:]
		again := c.post(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
		if again.status != http.StatusOK {
			t.Fatalf("new-account with the same key: %d %s", again.status, again.body)
		}
		rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventAccountCreated})
		if len(rows) != 1 {
			t.Fatalf("%d account_created rows, want one: %+v", len(rows), rows)
		}
		r := rows[0]
		if r.AccountID != id || r.ActorID != id || r.Outcome != "success" || r.ClientIP == "" || r.Profile != "test" {
			t.Errorf("account_created row %+v; want account and actor %s, a success, the client's address", r, id)
		}
	})
}
