package acmeproxy

import (
	"net/http"
	"path"
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A challenge whose validation fails is in the audit trail once, as
// challenge_failed — by the authorization's account, from the answering
// client's address, naming the order, the identifier and the problem —
// written with the challenge's result; answering it again, or a challenge
// that validates, adds no row. The audit search has offered the event
// as a filter all along.
func TestAFailedChallengeIsAuditedOnceAndAValidOneIsNot(t *testing.T) {
	tests := []struct {
		name     string
		answer   string // "" answers with the key authorization
		wantRows int
	}{
		{name: "fail/wrong key authorization is one challenge_failed row", answer: "not-the-key-authorization", wantRows: 1},
		{name: "ok/right key authorization is no row", answer: "", wantRows: 0},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				e := newTestEnv(t, nil)
				c := e.rawClient()
				c.register()
				acct := path.Base(c.kid)
				o := c.order(dnsID("audited.example.com"))
				ch, r := c.answerHTTP01(o.Authorizations[0], tt.answer)
				if r.status != http.StatusOK {
					t.Fatalf("challenge POST: %d %s", r.status, r.body)
				}
				want := "valid"
				if tt.wantRows > 0 {
					want = "invalid"
				}
				c.await(ch.URL, want)
				// Asking again answers the settled challenge, and
				// validates nothing.
				c.post(ch.URL, map[string]any{}, jwsOpts{})

				rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventChallengeFailed})
				if len(rows) != tt.wantRows {
					t.Fatalf("%d challenge_failed rows, want %d: %+v", len(rows), tt.wantRows, rows)
				}
				if tt.wantRows == 0 {
					return
				}
				row := rows[0]
				if row.Outcome != "failure" || row.Profile != "test" || row.ActorKind != "acme_account" || row.ActorID != acct ||
					row.AccountID != acct || row.OrderID != path.Base(o.url) || row.ClientIP == "" {
					t.Errorf("challenge_failed row %+v; want a failure by account %s in order %s, from the client's address",
						row, acct, path.Base(o.url))
				}
				if len(row.Identifiers) != 1 || row.Identifiers[0].Value != "audited.example.com" {
					t.Errorf("challenge_failed row names %+v, want audited.example.com", row.Identifiers)
				}
				if row.Reason != string(vocab.ErrorUnauthorized) && row.Reason != string(vocab.ErrorIncorrectResponse) {
					t.Errorf("challenge_failed reason %q, want the problem's type", row.Reason)
				}
				if row.Detail == "" {
					t.Error("challenge_failed row has no detail")
				}
			})
		}
	})
}
