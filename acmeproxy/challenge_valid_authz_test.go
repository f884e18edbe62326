package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// A client that answers more than one challenge of an authorization (some
// answer every type they support), or two of its processes racing, may
// post a challenge after another one made the authorization valid. The
// authorization is proven: the answer is taken as a no-op and the
// challenge returned as it stands, as Boulder does — not refused, which a
// client reads as its order failing — and no second validation starts
// (RFC 8555 §7.1.6: a valid authorization is final).
func TestAnswerToAnotherChallengeOfAValidAuthorizationIsReturnedAsItStands(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("twice.example.com"))
		az := o.Authorizations[0]
		other := challengeOf(t, alice.authz(az), acme.ChallengeDNS01)

		if _, r := alice.answerHTTP01(az, ""); r.status != http.StatusOK {
			t.Fatalf("http-01 answer: %d %s", r.status, r.body)
		}
		alice.await(az, "valid")

		r := alice.post(other.URL, map[string]any{}, jwsOpts{})
		if r.status != http.StatusOK {
			t.Fatalf("answer to the dns-01 challenge of a valid authorization: %d %s, want 200", r.status, r.body)
		}
		if got := decodeAs[challengeJSON](t, r); got.Status != "pending" || got.URL != other.URL {
			t.Errorf("it answered the challenge %s as %q, want %s as it stands (pending)", got.URL, got.Status, other.URL)
		}
		if r.header.Get("Link") == "" {
			t.Errorf("the answer has no Link to its authorization")
		}
		c, _, err := e.db.GetChallenge(context.Background(), e.srv.Profile(), path.Base(other.URL))
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != acme.StatusPending {
			t.Errorf("the dns-01 challenge is %s in the store; no validation may start on a valid authorization", c.Status)
		}
		if a := alice.authz(az); a.Status != "valid" {
			t.Errorf("the authorization reads %s after the answer, want valid", a.Status)
		}
		alice.await(o.url, "ready")
	})
}
