package acmeproxy

import (
	"net/http"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// RFC 8555 §7.5.1: a client answers a challenge with a JSON object ({}).
// A payload that is not one is a broken client's, and must not start the
// one validation a challenge gets.
func TestAChallengePOSTWhosePayloadIsNotAJSONObjectIsMalformedAndStartsNoValidation(t *testing.T) {
	for _, tc := range []struct{ name, payload string }{
		{"text", "not json at all"},
		{"an array", "[]"},
		{"a string", `"{}"`},
		{"a truncated object", `{"a":`},
		{"null", "null"},
		{"null padded with spaces", " null "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			alice := e.rawClient()
			alice.register()
			az := alice.order(dnsID("payload.example.com")).Authorizations[0]
			ch := challengeOf(t, alice.authz(az), acme.ChallengeHTTP01)
			e.http01.set(ch.Token, alice.keyAuthorization(ch.Token))

			wantProblem(t, alice.post(ch.URL, []byte(tc.payload), jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
			if got := challengeOf(t, alice.authz(az), acme.ChallengeHTTP01); got.Status != "pending" {
				t.Errorf("the challenge is %q after a malformed answer; want pending", got.Status)
			}
			if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status != http.StatusOK {
				t.Fatalf("the client's proper answer afterwards: %d %s", r.status, r.body)
			}
			alice.await(az, "valid")
		})
	}
}
