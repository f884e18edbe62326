package acmeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// rawSigned is a flattened JWS of a protected header and payload given
// as raw JSON text, signed by c's key: for members encoding/json would
// never write (two of one name).
func (c *rawClient) rawSigned(header, payload string) []byte {
	c.t.Helper()
	prot, pl := b64([]byte(header)), b64([]byte(payload))
	return marshal(c.t, map[string]string{"protected": prot, "payload": pl, "signature": b64(jwsSign(c.t, c.key, prot+"."+pl))})
}

// RFC 7515 §5.2 and RFC 8555 §6.2: a protected header naming a member
// twice is refused, whichever of the two a reader would take.
func TestAProtectedHeaderWithAMemberTwiceIsMalformed(t *testing.T) {
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	target := alice.kid
	tests := []struct {
		name   string
		header func() string
	}{
		{"fail/url twice, the second the request's", func() string {
			return `{"alg":"ES256","kid":"` + alice.kid + `","nonce":"` + alice.nonce() + `","url":"` + e.url("/new-order") + `","url":"` + target + `"}`
		}},
		{"fail/nonce twice", func() string {
			n := alice.nonce()
			return `{"alg":"ES256","kid":"` + alice.kid + `","nonce":"` + n + `","nonce":"` + alice.nonce() + `","url":"` + target + `"}`
		}},
		{"fail/alg twice", func() string {
			return `{"alg":"none","alg":"ES256","kid":"` + alice.kid + `","nonce":"` + alice.nonce() + `","url":"` + target + `"}`
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := alice.postRaw(target, "application/jose+json", alice.rawSigned(tc.header(), ""))
			wantProblem(t, r, http.StatusBadRequest, acme.ErrorMalformed)
		})
	}
}

// JSON member names are case-sensitive (RFC 8259 §8.3) and a member
// named twice has no one value (RFC 8259 §4: names SHOULD be unique; RFC
// 8555 §6.2 refuses duplicates in the JWS around the payload): every
// payload is read as the account update's was (decodePayload). A
// member in another case is one the server does not know, and ignores
// (RFC 8555 §7.3.2, §7.6); a member sent twice is malformed. Before, a
// payload was read by encoding/json: {"Status":"deactivated"} deactivated
// an authorization, {"TermsOfServiceAgreed":true} agreed to the terms, and
// the last of two "identifiers" was the order.
func TestEveryPayloadReadsMemberNamesExactlyAndRefusesAMemberSentTwice(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e := newTestEnv(t, func(c *ProfileConfig) {
			c.Challenges = []string{acme.ChallengeHTTP01}
			c.TermsOfService = "https://example.com/tos"
		})
		alice := e.rawClient()
		alice.register()
		owner := e.client(ctx)

		tests := []struct {
			name       string
			do         func(t *testing.T) rawResponse
			wantStatus int
			wantType   acme.ProblemType // "" for a success
		}{
			{"fail/an authorization deactivation spelled Status deactivates nothing", func(t *testing.T) rawResponse {
				o := alice.order(dnsID("status-case.example.com"))
				t.Cleanup(func() {
					if az := alice.authz(o.Authorizations[0]); az.Status != "pending" {
						t.Errorf("the authorization is %s, want pending", az.Status)
					}
				})
				return alice.post(o.Authorizations[0], []byte(`{"Status":"deactivated"}`), jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/an authorization deactivation with status twice", func(t *testing.T) rawResponse {
				o := alice.order(dnsID("status-twice.example.com"))
				return alice.post(o.Authorizations[0], []byte(`{"status":"valid","status":"deactivated"}`), jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/a new order with identifiers twice", func(t *testing.T) rawResponse {
				return alice.post(e.url("/new-order"), []byte(`{"identifiers":[{"type":"dns","value":"first.example.com"}],`+
					`"identifiers":[{"type":"dns","value":"second.example.com"}]}`), jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/a new order whose identifier has its value twice", func(t *testing.T) rawResponse {
				return alice.post(e.url("/new-order"), []byte(`{"identifiers":[{"type":"dns","value":"first.example.com","value":"second.example.com"}]}`), jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/a new account spelling TermsOfServiceAgreed has not agreed", func(t *testing.T) rawResponse {
				c := e.rawClient()
				t.Cleanup(func() {
					r := c.post(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{embedJWK: true})
					if r.problem == nil || r.problem.Type != acme.ErrorAccountDoesNotExist {
						t.Errorf("the key has an account: %d %s", r.status, r.body)
					}
				})
				return c.post(e.url("/new-account"), []byte(`{"TermsOfServiceAgreed":true}`), jwsOpts{embedJWK: true})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/a new account with onlyReturnExisting twice", func(t *testing.T) rawResponse {
				return e.rawClient().post(e.url("/new-account"), []byte(`{"termsOfServiceAgreed":true,"onlyReturnExisting":true,"onlyReturnExisting":false}`), jwsOpts{embedJWK: true})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"ok/a revocation reason spelled Reason is no reason", func(t *testing.T) rawResponse {
				c := e.issue(ctx, owner, "reason-case.example.com")
				t.Cleanup(func() {
					stored, err := e.db.CertificateOfOrder(ctx, c.order)
					if err != nil {
						t.Fatal(err)
					}
					if stored.RevokedAt.IsZero() || stored.Reason != nil {
						t.Errorf("stored revocation at %v reason %v, want revoked with no reason", stored.RevokedAt, stored.Reason)
					}
				})
				return e.raw(owner).post(e.url("/revoke-cert"), []byte(`{"certificate":"`+b64(c.der)+`","Reason":1}`), jwsOpts{})
			}, http.StatusOK, ""},
			{"fail/a revocation with reason twice", func(t *testing.T) rawResponse {
				c := e.issue(ctx, owner, "reason-twice.example.com")
				t.Cleanup(func() {
					stored, err := e.db.CertificateOfOrder(ctx, c.order)
					if err != nil {
						t.Fatal(err)
					}
					if !stored.RevokedAt.IsZero() {
						t.Errorf("the certificate was revoked with reason %v", stored.Reason)
					}
				})
				return e.raw(owner).post(e.url("/revoke-cert"), []byte(`{"certificate":"`+b64(c.der)+`","reason":0,"reason":1}`), jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/a finalize with csr twice", func(t *testing.T) rawResponse {
				o := alice.readyOrder("csr-twice.example.com")
				csr := b64(newCSR(t, newKey(t), "", []string{"csr-twice.example.com"}, nil))
				return alice.post(o.Finalize, []byte(`{"csr":"`+csr+`","csr":"`+csr+`"}`), jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
			{"fail/a key change whose inner payload names its account twice", func(t *testing.T) rawResponse {
				bob := e.rawClient()
				bob.register()
				inner := innerKeyChange(t, e, innerSpec{signer: newKey(t), payload: `{"account":"` + alice.kid + `","account":"` + bob.kid +
					`","oldKey":` + string(jwkOf(t, bob.key.Public())) + `}`})
				return bob.post(e.url("/key-change"), inner, jwsOpts{})
			}, http.StatusBadRequest, acme.ErrorMalformed},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := tc.do(t)
				if tc.wantType == "" {
					if r.status != tc.wantStatus {
						t.Fatalf("got %d %s, want %d", r.status, r.body, tc.wantStatus)
					}
					return
				}
				wantProblem(t, r, tc.wantStatus, tc.wantType)
			})
		}
	})
}

// RFC 8555 §7.4.1: a server that does not allow pre-authorization "MUST
// omit the newAuthz field of the directory"; the path a client might
// guess is no resource, answered as any other (404, a problem document
// with a nonce and the index link).
func TestTheDirectoryHasNoNewAuthzAndNoSuchResourceIsServed(t *testing.T) {
	e := newTestEnv(t, nil)
	var dir map[string]any
	if err := json.Unmarshal(e.plain(http.MethodGet, e.dirURL).body, &dir); err != nil {
		t.Fatal(err)
	}
	if v, ok := dir["newAuthz"]; ok {
		t.Errorf("the directory names newAuthz %v", v)
	}
	alice := e.rawClient()
	alice.register()
	r := alice.post(e.url("/new-authz"), map[string]any{"identifier": dnsID("pre.example.com")}, jwsOpts{})
	wantProblem(t, r, http.StatusNotFound, acme.ErrorMalformed)
	if r.header.Get("Replay-Nonce") == "" || !e.hasIndexLink(r) {
		t.Errorf("the 404 lacks a Replay-Nonce or the index link: %v", r.header)
	}
}

// RFC 8555 §7.4.2: the certificate's default format is
// application/pem-certificate-chain, the one format served here; a
// client's Accept for another (application/pkix-cert,
// application/pkcs7-mime) is answered with the chain in that format and
// its Content-Type says so, rather than a 406 no ACME client expects.
func TestACertificateIsServedAsAPEMChainWhateverTheClientAccepts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	owner := e.client(ctx)
	c := e.issue(ctx, owner, "accept.example.com")
	rc := e.raw(owner)
	certURL := decodeAs[orderJSON](t, rc.read(e.url("/order/"+c.order))).Certificate
	for _, accept := range []string{"", "application/pem-certificate-chain", "application/pkix-cert", "application/pkcs7-mime", "*/*"} {
		t.Run("ok/Accept "+accept, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, certURL, bytes.NewReader(rc.sign(certURL, nil, jwsOpts{})))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/jose+json")
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/pem-certificate-chain" {
				t.Fatalf("%d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if got := firstCertificate(t, body); !bytes.Equal(got.Raw, c.der) {
				t.Errorf("the chain's first certificate is not the one issued")
			}
		})
	}
}

// A protected header that is a JSON object but has a member of the wrong
// type, or one twice, is malformed, and its detail says which rather than
// that the header is not a JSON object.
func TestAProtectedHeaderMemberOfTheWrongTypeIsNamedInTheDetail(t *testing.T) {
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	tests := []struct {
		name       string
		header     func() string
		wantDetail string
	}{
		{"fail/a nonce that is a number", func() string {
			return `{"alg":"ES256","kid":"` + alice.kid + `","nonce":12,"url":"` + alice.kid + `"}`
		}, `the JWS protected header has a number where "nonce" takes a string`},
		{"fail/a url that is an object", func() string {
			return `{"alg":"ES256","kid":"` + alice.kid + `","nonce":"` + alice.nonce() + `","url":{}}`
		}, `the JWS protected header has an object where "url" takes a string`},
		{"fail/a kid twice", func() string {
			return `{"alg":"ES256","kid":"` + alice.kid + `","kid":"` + alice.kid + `","nonce":"` + alice.nonce() + `","url":"` + alice.kid + `"}`
		}, `the JWS protected header has a member twice`},
		{"fail/a header that is an array", func() string { return `["ES256"]` }, `the JWS protected header is not a JSON object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := alice.postRaw(alice.kid, "application/jose+json", alice.rawSigned(tc.header(), ""))
			wantProblem(t, r, http.StatusBadRequest, acme.ErrorMalformed)
			if r.problem.Detail != tc.wantDetail {
				t.Errorf("detail %q, want %q", r.problem.Detail, tc.wantDetail)
			}
		})
	}
}
