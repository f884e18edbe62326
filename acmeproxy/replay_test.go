package acmeproxy

import (
	"crypto"
	"net/http"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// issueRaw has c obtain a certificate for name through the protocol and
// returns its leaf DER and key.
func (c *rawClient) issueRaw(name string) ([]byte, crypto.Signer) {
	c.t.Helper()
	o := c.readyOrder(name)
	key := newKey(c.t)
	r := c.finalize(o, newCSR(c.t, key, "", []string{name}, nil))
	if r.status != http.StatusOK {
		c.t.Fatalf("finalize: %d %s", r.status, r.body)
	}
	cert := c.read(decodeAs[orderJSON](c.t, r).Certificate)
	if cert.status != http.StatusOK {
		c.t.Fatalf("certificate: %d %s", cert.status, cert.body)
	}
	return firstCertificate(c.t, cert.body).Raw, key
}

// RFC 8555 §6.5: a server "MUST reject any request whose nonce it has seen
// before", whichever way the request is signed and whatever it asks. Each
// route gets a request it accepts (or refuses only after spending the
// nonce); the very same bytes sent again are a replay and get badNonce,
// with a fresh nonce for the retry.
func TestReplayingASignedRequestOnAnyRouteIsABadNonce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		// signed is a request to target, signed by c.
		signed := func(c *rawClient, target string, payload []byte, o jwsOpts) (string, []byte) {
			return target, c.sign(target, payload, o)
		}
		tests := []struct {
			name string
			// request builds the request once, with c speaking for alice:
			// its URL and signed body.
			request   func(t *testing.T, c *rawClient) (string, []byte)
			wantFirst int
		}{
			{"new-account, signed by the new key (jwk)", func(t *testing.T, c *rawClient) (string, []byte) {
				stranger := &rawClient{t: t, e: e, key: newKey(t)}
				return signed(stranger, e.url("/new-account"), []byte(`{"termsOfServiceAgreed":true}`), jwsOpts{embedJWK: true})
			}, http.StatusCreated},
			{"new-account for an existing key (jwk)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, e.url("/new-account"), []byte(`{"onlyReturnExisting":true}`), jwsOpts{embedJWK: true})
			}, http.StatusOK},
			{"revoke-cert, signed by the certificate's key (jwk)", func(t *testing.T, c *rawClient) (string, []byte) {
				der, key := c.issueRaw("replay-jwk.example.com")
				return signed(c, e.url("/revoke-cert"), marshal(t, map[string]any{"certificate": b64(der)}), jwsOpts{embedJWK: true, key: key})
			}, http.StatusOK},
			{"revoke-cert, signed by the ordering account (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				der, _ := c.issueRaw("replay-kid.example.com")
				return signed(c, e.url("/revoke-cert"), marshal(t, map[string]any{"certificate": b64(der), "reason": 4}), jwsOpts{})
			}, http.StatusOK},
			{"new-order (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, e.url("/new-order"), marshal(t, map[string]any{"identifiers": []any{dnsID("replay.example.com")}}), jwsOpts{})
			}, http.StatusCreated},
			{"account POST-as-GET (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, c.kid, nil, jwsOpts{})
			}, http.StatusOK},
			{"account contact update (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, c.kid, []byte(`{"contact":["mailto:replay@example.com"]}`), jwsOpts{})
			}, http.StatusOK},
			{"account orders list (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, c.kid+"/orders", nil, jwsOpts{})
			}, http.StatusOK},
			{"order POST-as-GET (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, c.order(dnsID("read.example.com")).url, nil, jwsOpts{})
			}, http.StatusOK},
			{"authorization POST-as-GET (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, c.order(dnsID("authz.example.com")).Authorizations[0], nil, jwsOpts{})
			}, http.StatusOK},
			{"authorization deactivation (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				return signed(c, c.order(dnsID("deact.example.com")).Authorizations[0], []byte(`{"status":"deactivated"}`), jwsOpts{})
			}, http.StatusOK},
			{"challenge answer (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				ch := challengeOf(t, c.authz(c.order(dnsID("chall.example.com")).Authorizations[0]), acme.ChallengeHTTP01)
				return signed(c, ch.URL, []byte(`{}`), jwsOpts{})
			}, http.StatusOK},
			{"finalize (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				o := c.readyOrder("final.example.com")
				csr := newCSR(t, newKey(t), "", []string{"final.example.com"}, nil)
				return signed(c, o.Finalize, marshal(t, map[string]string{"csr": b64(csr)}), jwsOpts{})
			}, http.StatusOK},
			{"certificate POST-as-GET (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				r := c.finalize(c.readyOrder("dl.example.com"), newCSR(t, newKey(t), "", []string{"dl.example.com"}, nil))
				return signed(c, decodeAs[orderJSON](t, r).Certificate, nil, jwsOpts{})
			}, http.StatusOK},
			// The key change is refused for its inner payload, after the
			// outer nonce is spent: a successful one would leave the replay
			// signed by a key that is no longer the account's.
			{"key-change, refused after its nonce was spent (kid)", func(t *testing.T, c *rawClient) (string, []byte) {
				inner := innerKeyChange(t, e, innerSpec{signer: newKey(t), account: e.url("/account/someone-else"), oldKey: c.key.Public()})
				return signed(c, e.url("/key-change"), inner, jwsOpts{})
			}, http.StatusForbidden},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := *alice
				c.t = t
				target, body := tc.request(t, &c)
				first := c.postRaw(target, "application/jose+json", body)
				if first.status != tc.wantFirst {
					t.Fatalf("first request: %d %s, want %d", first.status, first.body, tc.wantFirst)
				}
				replay := c.postRaw(target, "application/jose+json", body)
				wantProblem(t, replay, http.StatusBadRequest, acme.ErrorBadNonce)
				if n := replay.header.Get("Replay-Nonce"); n == "" || n == first.header.Get("Replay-Nonce") {
					t.Errorf("the badNonce answer carries no fresh nonce: %q", n)
				}
			})
		}
	})
}
