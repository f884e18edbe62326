package acmeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// A problem may repeat what the client sent — a certificate profile's
// name, an identifier, a date, an algorithm, a kid, a name in its CSR —
// so that it sees what was refused. What it repeats is bounded (a name of
// tens of KiB is not echoed back whole) and escaped: no control character
// (an ESC sequence a client prints to its operator's terminal) or
// invisible formatting character reaches a problem's detail as itself.
func TestAProblemRepeatsWhatTheClientSentBoundedAndEscaped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	c, o, _ := readyOrder(t, ctx, e, "echo.example.com")
	finalizer := e.raw(c)

	long := strings.Repeat("y", 40<<10) // within a request's size once signed
	nasty := "\x1b[31mred\x1b[0m\x07"   // IA5 text, as a dNSName may hold
	newOrder := func(payload string) func() rawResponse {
		return func() rawResponse { return alice.post(e.url("/new-order"), []byte(payload), jwsOpts{}) }
	}
	cases := []struct {
		name string
		send func() rawResponse
		typ  acme.ProblemType
	}{
		{"fail/a long certificate profile name", newOrder(`{"identifiers":[{"type":"dns","value":"a.example.com"}],"profile":"` + long + `"}`), acme.ErrorInvalidProfile},
		{"fail/a certificate profile name with control characters", newOrder(`{"identifiers":[{"type":"dns","value":"a.example.com"}],"profile":"\u001b[31mred\u001b[0m\u202egnp.exe\u0000"}`), acme.ErrorInvalidProfile},
		{"fail/a long DNS identifier", newOrder(`{"identifiers":[{"type":"dns","value":"` + long + `"}]}`), acme.ErrorRejectedIdentifier},
		{"fail/a long identifier type", newOrder(`{"identifiers":[{"type":"` + long + `","value":"a.example.com"}]}`), acme.ErrorUnsupportedIdentifier},
		{"fail/a long notBefore", newOrder(`{"identifiers":[{"type":"dns","value":"a.example.com"}],"notBefore":"` + long + `"}`), acme.ErrorMalformed},
		{"fail/a long JWS algorithm", func() rawResponse {
			hdr, _ := json.Marshal(map[string]string{"alg": long, "kid": alice.kid, "nonce": "n", "url": e.url("/new-order")})
			body, _ := json.Marshal(map[string]string{"protected": b64(hdr), "payload": "", "signature": "AAAA"})
			return alice.postRaw(e.url("/new-order"), "application/jose+json", body)
		}, acme.ErrorBadSignatureAlgorithm},
		{"fail/a long JWS url", func() rawResponse {
			return alice.post(e.url("/new-order"), []byte(`{}`), jwsOpts{url: e.url("/") + long})
		}, acme.ErrorUnauthorized},
		{"fail/a long kid", func() rawResponse {
			return alice.post(e.url("/new-order"), []byte(`{}`), jwsOpts{kid: e.url("/account/") + long})
		}, acme.ErrorAccountDoesNotExist},
		{"fail/a long content type", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/"+long, []byte(`{}`))
		}, acme.ErrorMalformed},
		{"fail/a CSR naming a DNS name with control characters", func() rawResponse {
			csr := newCSR(t, newKey(t), "", []string{"echo.example.com", nasty + ".example.com"}, nil)
			return finalizer.post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
		}, acme.ErrorBadCSR},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.send()
			if r.problem == nil || r.problem.Type != tc.typ {
				t.Fatalf("answered %d %.300s; want a problem of type %s", r.status, r.body, tc.typ)
			}
			if len(r.body) > 8<<10 {
				t.Errorf("a problem of %d bytes: what the client sent is echoed back at length", len(r.body))
			}
			ps := append([]*problem.Problem{r.problem}, r.problem.Subproblems...)
			for _, p := range ps {
				for _, ch := range p.Detail {
					if unicode.IsControl(ch) || unicode.Is(unicode.Cf, ch) {
						t.Errorf("detail %q holds the character %U as itself", p.Detail, ch)
						break
					}
				}
				if p.Identifier != nil && (len(p.Identifier.Value) > problem.MaxEcho || len(p.Identifier.Type) > problem.MaxEcho) {
					t.Errorf("a subproblem's identifier of %d+%d bytes", len(p.Identifier.Type), len(p.Identifier.Value))
				}
			}
			if bytes.Contains(r.body, []byte(strings.Repeat("y", 2*problem.MaxEcho))) {
				t.Errorf("the problem repeats more than %d bytes of a value", problem.MaxEcho)
			}
		})
	}
}
