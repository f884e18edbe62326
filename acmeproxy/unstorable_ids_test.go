package acmeproxy

import (
	"crypto/ecdsa"
	"net/http"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// An id a client sends — in a resource's path, in a kid, as the orders
// list's cursor, as an external account binding's kid — that holds a NUL
// or bytes that are not UTF-8 names nothing this server made: it is
// answered as any unknown id, not as a server fault (PostgreSQL refuses
// such text in a statement, which was answered 500 serverInternal and
// logged as a failed request every time).
func TestAnIDNoRowCanHoldIsAnsweredAsUnknownNotAsAFault(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, func(c *ProfileConfig) { c.EAB = authority.EABOptional })
		alice := e.rawClient()
		alice.register()
		type want struct {
			status int
			typ    acme.ProblemType // "" for a success
		}
		notFound := want{http.StatusNotFound, acme.ErrorMalformed}
		var cases []struct {
			name string
			do   func() rawResponse
			want want
		}
		add := func(name string, do func() rawResponse, w want) {
			cases = append(cases, struct {
				name string
				do   func() rawResponse
				want want
			}{name, do, w})
		}
		for _, id := range []struct{ name, path string }{
			{"a NUL", "%00"}, {"a NUL inside", "a%00b"}, {"a byte that is not UTF-8", "%ff"}, {"a broken UTF-8 sequence", "%c3%28"},
		} {
			add("an order id with "+id.name, func() rawResponse { return alice.read(e.url("/order/" + id.path)) }, notFound)
			add("a finalize of an order id with "+id.name, func() rawResponse {
				return alice.post(e.url("/order/"+id.path+"/finalize"), map[string]string{"csr": "AA"}, jwsOpts{})
			}, notFound)
			add("an authorization id with "+id.name, func() rawResponse { return alice.read(e.url("/authz/" + id.path)) }, notFound)
			add("a challenge id with "+id.name, func() rawResponse { return alice.read(e.url("/chall/" + id.path)) }, notFound)
			add("a certificate id with "+id.name, func() rawResponse { return alice.read(e.url("/cert/" + id.path)) }, notFound)
			add("an alternate chain's certificate id with "+id.name, func() rawResponse { return alice.read(e.url("/cert/" + id.path + "/1")) }, notFound)
			add("an orders list cursor with "+id.name, func() rawResponse { return alice.read(alice.kid + "/orders?cursor=" + id.path) },
				want{http.StatusOK, ""})
		}
		add("a kid whose account id is a NUL", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("a.example.com")}},
				jwsOpts{kid: e.url("/account/\x00")})
		}, want{http.StatusBadRequest, acme.ErrorAccountDoesNotExist})
		add("an external account binding whose kid is a NUL", func() rawResponse {
			c := e.rawClient()
			binding := eabJWS{alg: "HS256", kid: "\x00", url: e.url("/new-account"), macKey: make([]byte, 32)}.build(t, c.key.(*ecdsa.PrivateKey))
			return c.post(e.url("/new-account"), map[string]any{"externalAccountBinding": binding}, jwsOpts{embedJWK: true})
		}, want{http.StatusForbidden, acme.ErrorUnauthorized})
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := c.do()
				if c.want.typ == "" {
					if r.status != c.want.status {
						t.Fatalf("got %d %s, want %d", r.status, r.body, c.want.status)
					}
					return
				}
				wantProblem(t, r, c.want.status, c.want.typ)
			})
		}
	})
}
