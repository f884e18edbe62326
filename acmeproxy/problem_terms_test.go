package acmeproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// A client that sent a payload, a JWS, a key, a CSR or a certificate the
// server cannot read is told what was wrong in the terms of what it sent —
// the member and the JSON type it takes, the DER that does not parse —
// never in the Go types the server decodes into (encoding/json's "Go
// struct field … of type []acme.Identifier", encoding/asn1's field
// parameters, a %T).
func TestAProblemAboutWhatTheClientSentSaysWhatWasWrongWithoutGoTypeNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	c, o, _ := readyOrder(t, ctx, e, "terms.example.com")
	finalizer := e.raw(c)

	// jwsWithJWK is a flattened JWS whose protected header carries jwk.
	jwsWithJWK := func(jwk string) []byte {
		hdr := `{"alg":"ES256","nonce":"n","url":"` + e.url("/new-account") + `","jwk":` + jwk + `}`
		b, _ := json.Marshal(map[string]string{"protected": b64([]byte(hdr)), "payload": "", "signature": "AAAA"})
		return b
	}
	cases := []struct {
		name   string
		send   func() rawResponse
		status int
		typ    acme.ProblemType
		want   string
	}{
		{"fail/identifiers is a string", func() rawResponse {
			return alice.post(e.url("/new-order"), []byte(`{"identifiers":"a.example.com"}`), jwsOpts{})
		}, http.StatusBadRequest, acme.ErrorMalformed, `has a string where "identifiers" takes an array`},
		{"fail/an identifier is a number", func() rawResponse {
			return alice.post(e.url("/new-order"), []byte(`{"identifiers":[1]}`), jwsOpts{})
		}, http.StatusBadRequest, acme.ErrorMalformed, `has a number where "identifiers" takes an object`},
		{"fail/an identifier's type is a number", func() rawResponse {
			return alice.post(e.url("/new-order"), []byte(`{"identifiers":[{"type":1,"value":"a.example.com"}]}`), jwsOpts{})
		}, http.StatusBadRequest, acme.ErrorMalformed, `has a number where "identifiers.type" takes a string`},
		{"fail/termsOfServiceAgreed is a string", func() rawResponse {
			return alice.post(e.url("/new-account"), []byte(`{"termsOfServiceAgreed":"yes"}`), jwsOpts{embedJWK: true})
		}, http.StatusBadRequest, acme.ErrorMalformed, `has a string where "termsOfServiceAgreed" takes a boolean`},
		{"fail/a revocation's reason is a string", func() rawResponse {
			return alice.post(e.url("/revoke-cert"), []byte(`{"certificate":"AAAA","reason":"keyCompromise"}`), jwsOpts{})
		}, http.StatusBadRequest, acme.ErrorMalformed, `has a string where "reason" takes a number`},
		{"fail/the body is a JSON array, not a flattened JWS", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json", []byte(`[]`))
		}, http.StatusBadRequest, acme.ErrorMalformed, "not a flattened JWS: it has an array where an object belongs"},
		{"fail/the JWS's protected header is a number", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json", []byte(`{"protected":5,"payload":"","signature":"AAAA"}`))
		}, http.StatusBadRequest, acme.ErrorMalformed, "not a flattened JWS: it has a number where a string belongs"},
		{"fail/the JWK is an array", func() rawResponse {
			return alice.postRaw(e.url("/new-account"), "application/jose+json", jwsWithJWK(`[1]`))
		}, http.StatusBadRequest, acme.ErrorBadPublicKey, "the JWK has an array where an object belongs"},
		{"fail/the JWK's x is a number", func() rawResponse {
			return alice.postRaw(e.url("/new-account"), "application/jose+json", jwsWithJWK(`{"kty":"EC","crv":"P-256","x":5,"y":"AAAA"}`))
		}, http.StatusBadRequest, acme.ErrorBadPublicKey, "the JWK has a number where a string belongs"},
		{"fail/the CSR is not DER", func() rawResponse {
			return finalizer.post(o.FinalizeURL, map[string]string{"csr": b64([]byte{0x30, 0x03, 0x02, 0x01, 0x01})}, jwsOpts{})
		}, http.StatusBadRequest, acme.ErrorBadCSR, "the CSR is not well-formed DER"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.send()
			wantProblem(t, r, tc.status, tc.typ)
			if !strings.Contains(r.problem.Detail, tc.want) {
				t.Errorf("detail %q; want it to say %q", r.problem.Detail, tc.want)
			}
			for _, internal := range []string{"Go ", "acme.", "acmeproxy.", "jose.", "[]", "*", "struct", "asn1", "optional:", "json:"} {
				if strings.Contains(r.problem.Detail, internal) {
					t.Errorf("detail %q names Go internals (%q)", r.problem.Detail, internal)
				}
			}
		})
	}
}
