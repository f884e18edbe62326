package acmeproxy

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
)

// renewalInfo is read by GET (RFC 9773 §4.1); any other method — a POST
// as an early draft had it, a client's POST-as-GET, a PUT — is refused
// as every resource refuses a method (RFC 8555 §6.7): 405, Allow naming
// GET and HEAD, a malformed problem document. And since every
// renewalInfo answer says when to ask again (RFC 9773 §4.3), the refusal
// carries the profile's Retry-After too.
func TestRenewalInfoByAnotherMethodThanGETIsA405ProblemWithAllowAndRetryAfter(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e := newTestEnv(t, func(c *ProfileConfig) {
			c.RenewalInfo = &RenewalInfoConfig{RetryAfter: Duration(90 * time.Minute)}
		})
		c := e.client(ctx)
		leaf := e.issue(ctx, c, "method.example.com").leaf
		target := e.url("/renewal-info/" + certIDOf(leaf))
		send := func(method string, body []byte, contentType string) rawResponse {
			t.Helper()
			req, err := http.NewRequest(method, target, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if contentType != "" {
				req.Header.Set("Content-Type", contentType)
			}
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return readResponse(t, resp)
		}
		rc := e.raw(c)
		cases := []struct {
			name string
			do   func() rawResponse
		}{
			{"fail/an unsigned POST", func() rawResponse { return send(http.MethodPost, nil, "") }},
			{"fail/a POST-as-GET by the certificate's account", func() rawResponse {
				return send(http.MethodPost, rc.sign(target, nil, jwsOpts{}), "application/jose+json")
			}},
			{"fail/a POST with a JSON body", func() rawResponse { return send(http.MethodPost, []byte(`{}`), "application/json") }},
			{"fail/a PUT", func() rawResponse { return send(http.MethodPut, nil, "") }},
			{"fail/a DELETE", func() rawResponse { return send(http.MethodDelete, nil, "") }},
			{"fail/a PATCH", func() rawResponse { return send(http.MethodPatch, nil, "") }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := tc.do()
				wantProblem(t, r, http.StatusMethodNotAllowed, vocab.ErrorMalformed)
				if got := r.header.Get("Content-Type"); got != "application/problem+json" {
					t.Errorf("Content-Type %q, want a problem document", got)
				}
				if got := r.header.Get("Allow"); got != "GET, HEAD" {
					t.Errorf("Allow %q, want \"GET, HEAD\"", got)
				}
				if got := r.header.Get("Retry-After"); got != "5400" {
					t.Errorf("Retry-After %q on the 405, want the profile's 5400", got)
				}
			})
		}
		// The same URL by GET is the certificate's window: the 405 was
		// about the method, not the certID.
		e.window(leaf, "5400")
		// Another resource's 405 says nothing about renewal windows.
		if got := e.plain(http.MethodGet, e.url("/new-order")).header.Get("Retry-After"); got != "" {
			t.Errorf("a 405 of new-order carries Retry-After %q", got)
		}
	})
}
