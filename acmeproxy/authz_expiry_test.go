package acmeproxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
)

// RFC 8555 §7.1.6: an authorization, pending or valid, becomes expired
// when its expiry passes, and expired is final: it is read as expired
// (the valid one still listing only the challenge that validated it,
// §7.1.4), it can no longer be deactivated (§7.5.2), and its challenges
// can no longer be answered.
func TestAnAuthorizationPastItsExpiryIsExpiredWhetherItWasPendingOrValid(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		clk := clocktest.New(time.Now())
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = clk }})
		alice := e.rawClient()
		alice.register()

		pending := alice.order(dnsID("pending.example.com"))
		issued := alice.readyOrder("valid.example.com")
		if r := alice.finalize(issued, newCSR(t, newKey(t), "", []string{"valid.example.com"}, nil)); r.status != http.StatusOK {
			t.Fatalf("finalize: %d %s", r.status, r.body)
		}
		validated := challengeOf(t, alice.authz(issued.Authorizations[0]), acme.ChallengeHTTP01)
		clk.Advance(authority.OrderLifetime + time.Minute)

		tests := []struct {
			name           string
			authz          string
			wantChallenges []string // the challenge URLs it lists
		}{
			{"a pending authorization", pending.Authorizations[0], nil},
			{"a valid authorization", issued.Authorizations[0], []string{validated.URL}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				a := alice.authz(tc.authz)
				if a.Status != acme.StatusExpired {
					t.Errorf("past its expiry %s it reads %s, want expired", a.Expires, a.Status)
				}
				if tc.wantChallenges != nil {
					var got []string
					for _, c := range a.Challenges {
						got = append(got, c.URL)
					}
					if len(got) != len(tc.wantChallenges) || got[0] != tc.wantChallenges[0] {
						t.Errorf("it lists challenges %v, want %v", got, tc.wantChallenges)
					}
				}
				r := alice.post(tc.authz, map[string]string{"status": "deactivated"}, jwsOpts{})
				wantProblem(t, r, http.StatusBadRequest, acme.ErrorMalformed)
				if st := alice.authz(tc.authz).Status; st != acme.StatusExpired {
					t.Errorf("after a refused deactivation it reads %s, want expired", st)
				}
			})
		}
		if st := decodeAs[orderJSON](t, alice.read(issued.url)).Status; st != acme.StatusValid {
			t.Errorf("the order of the expired authorization reads %s; an issued order stays valid", st)
		}
	})
}
