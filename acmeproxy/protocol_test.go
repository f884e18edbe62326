package acmeproxy

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
)

// ---- helpers ----

func dnsID(v string) map[string]string { return map[string]string{"type": "dns", "value": v} }
func ipID(v string) map[string]string  { return map[string]string{"type": "ip", "value": v} }

func decodeAs[T any](t testing.TB, r rawResponse) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%d response does not decode as %T: %v: %s", r.status, v, err, r.body)
	}
	return v
}

// readResponse turns an HTTP response into a rawResponse.
func readResponse(t testing.TB, resp *http.Response) rawResponse {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), problem.ContentType) {
		out.problem = &problem.Problem{}
		if err := json.Unmarshal(b, out.problem); err != nil {
			t.Fatalf("problem document does not parse: %v: %s", err, b)
		}
	}
	return out
}

// plain sends an unsigned request.
func (e *testEnv) plain(method, target string) rawResponse {
	e.t.Helper()
	req, err := http.NewRequest(method, target, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return readResponse(e.t, resp)
}

// registerWith creates the client's account with payload.
func (c *rawClient) registerWith(payload any) rawResponse {
	c.t.Helper()
	r := c.post(c.e.url("/new-account"), payload, jwsOpts{embedJWK: true})
	if r.status != http.StatusCreated {
		c.t.Fatalf("new-account: %d %s", r.status, r.body)
	}
	c.kid = r.header.Get("Location")
	return r
}

// read is a POST-as-GET (RFC 8555 §6.3).
func (c *rawClient) read(url string) rawResponse {
	c.t.Helper()
	return c.post(url, nil, jwsOpts{})
}

type createdOrder struct {
	url string
	orderJSON
}

func (c *rawClient) order(ids ...map[string]string) createdOrder {
	c.t.Helper()
	r := c.post(c.e.url("/new-order"), map[string]any{"identifiers": ids}, jwsOpts{})
	if r.status != http.StatusCreated {
		c.t.Fatalf("new-order %v: %d %s", ids, r.status, r.body)
	}
	return createdOrder{url: r.header.Get("Location"), orderJSON: decodeAs[orderJSON](c.t, r)}
}

func (c *rawClient) authz(url string) authzJSON {
	c.t.Helper()
	r := c.read(url)
	if r.status != http.StatusOK {
		c.t.Fatalf("authz %s: %d %s", url, r.status, r.body)
	}
	return decodeAs[authzJSON](c.t, r)
}

func challengeOf(t testing.TB, a authzJSON, typ string) challengeJSON {
	t.Helper()
	for _, ch := range a.Challenges {
		if ch.Type == typ {
			return ch
		}
	}
	t.Fatalf("authorization of %s offers no %s: %+v", a.Identifier.Value, typ, a.Challenges)
	return challengeJSON{}
}

// keyAuthorization is token.thumbprint (RFC 8555 §8.1).
func (c *rawClient) keyAuthorization(token string) string {
	c.t.Helper()
	tp, err := thumbprint(&jose.JSONWebKey{Key: c.key.Public()})
	if err != nil {
		c.t.Fatal(err)
	}
	return token + "." + tp
}

// await polls a resource until its status is one of want.
func (c *rawClient) await(url string, want ...string) rawResponse {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := c.read(url)
		var s struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(r.body, &s)
		if r.status == http.StatusOK && slices.Contains(want, s.Status) {
			return r
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s is %q (%d %s), want one of %v", url, s.Status, r.status, r.body, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// answerHTTP01 serves body for the authorization's http-01 token and asks
// for validation; it returns the challenge POST's response.
func (c *rawClient) answerHTTP01(authzURL, body string) (challengeJSON, rawResponse) {
	c.t.Helper()
	ch := challengeOf(c.t, c.authz(authzURL), acme.ChallengeHTTP01)
	if body == "" {
		body = c.keyAuthorization(ch.Token)
	}
	c.e.http01.set(ch.Token, body)
	return ch, c.post(ch.URL, map[string]any{}, jwsOpts{})
}

// readyOrder creates an order for names and validates it by http-01.
func (c *rawClient) readyOrder(names ...string) createdOrder {
	c.t.Helper()
	ids := make([]map[string]string, len(names))
	for i, n := range names {
		ids[i] = dnsID(n)
	}
	o := c.order(ids...)
	for _, az := range o.Authorizations {
		if _, r := c.answerHTTP01(az, ""); r.status != http.StatusOK {
			c.t.Fatalf("challenge POST: %d %s", r.status, r.body)
		}
		c.await(az, "valid")
	}
	o.orderJSON = decodeAs[orderJSON](c.t, c.await(o.url, "ready"))
	return o
}

func (c *rawClient) finalize(o createdOrder, csr []byte) rawResponse {
	c.t.Helper()
	return c.post(o.Finalize, map[string]string{"csr": b64(csr)}, jwsOpts{})
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// wantProblem fails t unless r is a problem of the given status and type.
func wantProblem(t testing.TB, r rawResponse, status int, typ acme.ProblemType) {
	t.Helper()
	if r.status != status || r.problem == nil || r.problem.Type != typ {
		t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, typ)
	}
}

// hasIndexLink reports whether r links to the directory (RFC 8555 §7.1).
func (e *testEnv) hasIndexLink(r rawResponse) bool {
	for _, l := range r.header.Values("Link") {
		if l == "<"+e.dirURL+`>;rel="index"` {
			return true
		}
	}
	return false
}

func linkWithRel(r rawResponse, rel string) string {
	for _, l := range r.header.Values("Link") {
		if u, ok := strings.CutSuffix(l, `>;rel="`+rel+`"`); ok {
			return strings.TrimPrefix(u, "<")
		}
	}
	return ""
}

// ---- response headers, directory, methods ----

// RFC 8555 §6.5 (Replay-Nonce on every response), §7.1 (Link rel="index"),
// §7.2 (new-nonce: HEAD 200, GET 204, Cache-Control: no-store), §7.3 and
// §7.4 (201 with Location for created resources), §7.3.1 (200 with the
// same Location for an existing key).
func TestSuccessfulResponsesCarryANonceTheIndexLinkAndNoStore(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		created := alice.registerWith(map[string]any{"termsOfServiceAgreed": true})
		again := alice.post(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
		newOrder := alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("h.example.com")}}, jwsOpts{})
		if newOrder.status != http.StatusCreated {
			t.Fatalf("new-order: %d %s", newOrder.status, newOrder.body)
		}
		o := decodeAs[orderJSON](t, newOrder)
		authz := alice.read(o.Authorizations[0])
		chall := alice.read(decodeAs[authzJSON](t, authz).Challenges[0].URL)

		tests := []struct {
			name         string
			r            rawResponse
			wantStatus   int
			wantLocation string // "" for none
		}{
			{"directory GET answers 200", e.plain(http.MethodGet, e.dirURL), http.StatusOK, ""},
			{"directory HEAD answers 200", e.plain(http.MethodHead, e.dirURL), http.StatusOK, ""},
			{"new-nonce HEAD answers 200", e.plain(http.MethodHead, e.url("/new-nonce")), http.StatusOK, ""},
			{"new-nonce GET answers 204", e.plain(http.MethodGet, e.url("/new-nonce")), http.StatusNoContent, ""},
			{"directory POST-as-GET answers 200", alice.read(e.dirURL), http.StatusOK, ""},
			{"new-nonce POST-as-GET answers 204", alice.read(e.url("/new-nonce")), http.StatusNoContent, ""},
			{"new-account for a new key answers 201 with its Location", created, http.StatusCreated, alice.kid},
			{"new-account for a known key answers 200 with the same Location", again, http.StatusOK, alice.kid},
			{"account POST-as-GET answers 200", alice.read(alice.kid), http.StatusOK, ""},
			{"account orders list answers 200", alice.read(alice.kid + "/orders"), http.StatusOK, ""},
			{"new-order answers 201 with the order's Location", newOrder, http.StatusCreated, strings.TrimSuffix(o.Finalize, "/finalize")},
			{"order POST-as-GET answers 200", alice.read(strings.TrimSuffix(o.Finalize, "/finalize")), http.StatusOK, ""},
			{"authorization POST-as-GET answers 200", authz, http.StatusOK, ""},
			{"challenge POST-as-GET answers 200", chall, http.StatusOK, ""},
		}
		if !strings.HasPrefix(alice.kid, e.url("/account/")) {
			t.Fatalf("account Location %q is not an account URL", alice.kid)
		}
		seen := map[string]string{}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if tc.r.status != tc.wantStatus {
					t.Fatalf("status %d, want %d: %s", tc.r.status, tc.wantStatus, tc.r.body)
				}
				n := tc.r.header.Get("Replay-Nonce")
				if n == "" {
					t.Errorf("no Replay-Nonce")
				} else if other, dup := seen[n]; dup {
					t.Errorf("Replay-Nonce %q was also sent with %q", n, other)
				}
				seen[n] = tc.name
				if !e.hasIndexLink(tc.r) {
					t.Errorf("no Link <%s>;rel=\"index\": %q", e.dirURL, tc.r.header.Values("Link"))
				}
				if cc := tc.r.header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
					t.Errorf("Cache-Control %q, want no-store", cc)
				}
				if got := tc.r.header.Get("Location"); tc.wantLocation != "" && got != tc.wantLocation {
					t.Errorf("Location %q, want %q", got, tc.wantLocation)
				}
			})
		}
	})
}

// RFC 8555 §7.1.1: the directory names newNonce, newAccount, newOrder,
// revokeCert and keyChange, each a resource this server serves.
func TestTheDirectoryNamesTheFiveResourcesAndEachExists(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		r := e.plain(http.MethodGet, e.dirURL)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Fatalf("directory: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		var dir map[string]any
		if err := json.Unmarshal(r.body, &dir); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			field, path string
			probe       string // method that must not be a 404
			wantStatus  int
		}{
			{"newNonce", "/new-nonce", http.MethodHead, http.StatusOK},
			{"newAccount", "/new-account", http.MethodGet, http.StatusMethodNotAllowed},
			{"newOrder", "/new-order", http.MethodGet, http.StatusMethodNotAllowed},
			{"revokeCert", "/revoke-cert", http.MethodGet, http.StatusMethodNotAllowed},
			{"keyChange", "/key-change", http.MethodGet, http.StatusMethodNotAllowed},
		}
		for _, tc := range tests {
			t.Run(tc.field, func(t *testing.T) {
				got, _ := dir[tc.field].(string)
				if got != e.url(tc.path) {
					t.Fatalf("%s = %q, want %q", tc.field, got, e.url(tc.path))
				}
				if p := e.plain(tc.probe, got); p.status != tc.wantStatus {
					t.Errorf("%s %s: %d, want %d", tc.probe, got, p.status, tc.wantStatus)
				}
			})
		}
	})
}

// RFC 8555 §6.3: resources read by POST-as-GET refuse GET with 405; RFC
// 9110 §15.5.6: a 405 lists the allowed methods in Allow.
func TestAWrongMethodAnswers405WithAllow(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		tests := []struct {
			name, method, path, wantAllow string
		}{
			{"GET new-account", http.MethodGet, "/new-account", "POST"},
			{"GET new-order", http.MethodGet, "/new-order", "POST"},
			{"GET key-change", http.MethodGet, "/key-change", "POST"},
			{"GET revoke-cert", http.MethodGet, "/revoke-cert", "POST"},
			{"PUT directory", http.MethodPut, "/directory", "GET, HEAD, POST"},
			{"PUT new-nonce", http.MethodPut, "/new-nonce", "GET, HEAD, POST"},
			{"GET an account", http.MethodGet, "/account/x", "POST"},
			{"GET an account's orders", http.MethodGet, "/account/x/orders", "POST"},
			{"GET an order", http.MethodGet, "/order/x", "POST"},
			{"GET a finalize URL", http.MethodGet, "/order/x/finalize", "POST"},
			{"GET an authorization", http.MethodGet, "/authz/x", "POST"},
			{"GET a challenge", http.MethodGet, "/chall/x", "POST"},
			{"GET a certificate", http.MethodGet, "/cert/x", "POST"},
			{"DELETE an order", http.MethodDelete, "/order/x", "POST"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := e.plain(tc.method, e.url(tc.path))
				wantProblem(t, r, http.StatusMethodNotAllowed, acme.ErrorMalformed)
				if got := r.header.Get("Allow"); got != tc.wantAllow {
					t.Errorf("Allow %q, want %q", got, tc.wantAllow)
				}
				if r.header.Get("Replay-Nonce") == "" || !e.hasIndexLink(r) {
					t.Errorf("405 lacks Replay-Nonce or the index Link: %v", r.header)
				}
			})
		}
	})
}

// RFC 8555 §6.3: the directory and new-nonce MUST be answered as
// POST-as-GET too — which is a signed request like any other: by an
// account, with an empty payload and a fresh nonce.
func TestAPostToTheDirectoryOrNewNonceIsAnsweredOnlyAsAnAccountsPostAsGet(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		for _, path := range []string{"/directory", "/new-nonce"} {
			spent := alice.nonce()
			if r := alice.post(e.url(path), nil, jwsOpts{nonce: &spent}); r.status >= 300 {
				t.Fatalf("POST-as-GET %s: %d %s", path, r.status, r.body)
			}
			tests := []struct {
				name       string
				r          rawResponse
				wantStatus int
				wantType   acme.ProblemType
			}{
				{"with a payload", alice.post(e.url(path), map[string]any{}, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed},
				{"signed by a bare key", e.rawClient().post(e.url(path), nil, jwsOpts{embedJWK: true}), http.StatusBadRequest, acme.ErrorMalformed},
				{"with a spent nonce", alice.post(e.url(path), nil, jwsOpts{nonce: &spent}), http.StatusBadRequest, acme.ErrorBadNonce},
				{"unsigned", e.plain(http.MethodPost, e.url(path)), http.StatusUnsupportedMediaType, acme.ErrorMalformed},
			}
			for _, tc := range tests {
				t.Run(path+" "+tc.name, func(t *testing.T) { wantProblem(t, tc.r, tc.wantStatus, tc.wantType) })
			}
		}
		dir := decodeAs[map[string]any](t, alice.read(e.dirURL))
		if got, _ := dir["newNonce"].(string); got != e.url("/new-nonce") {
			t.Errorf("the directory read by POST-as-GET names newNonce %q, want %q", got, e.url("/new-nonce"))
		}
	})
}

// RFC 8555 §6.7: errors are problem documents, a 404 included.
func TestAnUnknownPathAnswers404WithAProblem(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		for _, path := range []string{"/nope", "/order/", "/order/x/nope", "/account/x/orders/more", "/directory/extra", "/chall/x/y"} {
			t.Run(path, func(t *testing.T) {
				r := e.plain(http.MethodPost, e.url(path))
				if r.status != http.StatusNotFound || r.problem == nil || r.problem.Type == "" {
					t.Fatalf("got %d %q %s, want a 404 problem", r.status, r.header.Get("Content-Type"), r.body)
				}
				if r.header.Get("Replay-Nonce") == "" || !e.hasIndexLink(r) {
					t.Errorf("404 lacks Replay-Nonce or the index Link: %v", r.header)
				}
			})
		}
	})
}

// ---- nonces ----

// RFC 8555 §6.5: every response's nonce, an error's included, is good
// for exactly one request; §6.5 asks that a badNonce answer carry a
// fresh one for the retry.
func TestEveryNonceIsAcceptedExactlyOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		fromHeader := func(r rawResponse) string { return r.header.Get("Replay-Nonce") }
		tests := []struct {
			name   string
			source func() string
		}{
			{"a nonce from new-nonce HEAD", func() string { return fromHeader(e.plain(http.MethodHead, e.url("/new-nonce"))) }},
			{"a nonce from new-nonce GET", func() string { return fromHeader(e.plain(http.MethodGet, e.url("/new-nonce"))) }},
			{"a nonce from the directory", func() string { return fromHeader(e.plain(http.MethodGet, e.dirURL)) }},
			{"a nonce from a 201 new-account", func() string { return fromHeader(e.rawClient().registerWith(map[string]any{})) }},
			{"a nonce from a 200 POST-as-GET", func() string { return fromHeader(alice.read(alice.kid)) }},
			{"a nonce from a 404 error", func() string { return fromHeader(e.plain(http.MethodGet, e.url("/nope"))) }},
			{"a nonce from a 405 error", func() string { return fromHeader(e.plain(http.MethodGet, e.url("/new-order"))) }},
			{"a nonce from a 415 error", func() string {
				return fromHeader(alice.postRaw(e.url("/new-order"), "application/json", []byte(`{}`)))
			}},
			{"a nonce from a malformed-JWS error", func() string {
				return fromHeader(alice.postRaw(e.url("/new-order"), "application/jose+json", []byte(`{}`)))
			}},
			{"a nonce from a badNonce error", func() string {
				r := alice.post(alice.kid, nil, jwsOpts{nonce: strp("not-a-nonce")})
				wantProblem(t, r, http.StatusBadRequest, acme.ErrorBadNonce)
				return fromHeader(r)
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				n := tc.source()
				if n == "" {
					t.Fatal("no Replay-Nonce")
				}
				if r := alice.post(alice.kid, nil, jwsOpts{nonce: &n}); r.status != http.StatusOK {
					t.Fatalf("first use: %d %s", r.status, r.body)
				}
				wantProblem(t, alice.post(alice.kid, nil, jwsOpts{nonce: &n}), http.StatusBadRequest, acme.ErrorBadNonce)
			})
		}
	})
}

// ---- accounts ----

// RFC 8555 §7.3.2: a client updates its contacts with a POST to its
// account; the answer and later reads show the new list.
// manyContacts is n distinct mailto: contacts.
func manyContacts(n int) []string {
	cs := make([]string, n)
	for i := range cs {
		cs[i] = fmt.Sprintf("mailto:ops%d@example.com", i)
	}
	return cs
}

func TestAnAccountsContactsCanBeUpdated(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		old := []string{"mailto:old@example.com"}
		tests := []struct {
			name        string
			payload     any
			wantContact []string
			wantStatus  int
			wantType    acme.ProblemType
		}{
			{name: "ok/the contact list is replaced", payload: map[string]any{"contact": []string{"mailto:new@example.com", "mailto:ops@example.com"}},
				wantContact: []string{"mailto:new@example.com", "mailto:ops@example.com"}, wantStatus: 200},
			{name: "ok/an empty list removes every contact", payload: map[string]any{"contact": []string{}}, wantContact: nil, wantStatus: 200},
			{name: "ok/an update without contact leaves it alone", payload: map[string]any{"termsOfServiceAgreed": true}, wantContact: old, wantStatus: 200},
			{name: "fail/a contact that is not mailto", payload: map[string]any{"contact": []string{"tel:+15555550100"}},
				wantContact: old, wantStatus: 400, wantType: acme.ErrorUnsupportedContact},
			{name: "fail/a mailto with two addresses", payload: map[string]any{"contact": []string{"mailto:a@example.com,b@example.com"}},
				wantContact: old, wantStatus: 400, wantType: acme.ErrorInvalidContact},
			{name: "fail/a mailto with header fields", payload: map[string]any{"contact": []string{"mailto:a@example.com?subject=hi"}},
				wantContact: old, wantStatus: 400, wantType: acme.ErrorInvalidContact},
			{name: "ok/ten contacts are kept", payload: map[string]any{"contact": manyContacts(10)}, wantContact: manyContacts(10), wantStatus: 200},
			{name: "fail/more than ten contacts", payload: map[string]any{"contact": manyContacts(11)},
				wantContact: old, wantStatus: 400, wantType: acme.ErrorInvalidContact},
			{name: "fail/an address longer than an e-mail path may be", payload: map[string]any{"contact": []string{"mailto:" + strings.Repeat("a", 64) + "@" + strings.Repeat("b", 190) + ".example"}},
				wantContact: old, wantStatus: 400, wantType: acme.ErrorInvalidContact},
			// RFC 8555 §7.3.2: the server MUST ignore updates to the status
			// field but a deactivation.
			{name: "ok/a status other than deactivated is ignored", payload: map[string]any{"status": "revoked"}, wantContact: old, wantStatus: 200},
			{name: "ok/a status other than deactivated leaves the contact update to go through",
				payload:     map[string]any{"status": "revoked", "contact": []string{"mailto:new@example.com"}},
				wantContact: []string{"mailto:new@example.com"}, wantStatus: 200},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := e.rawClient()
				c.registerWith(map[string]any{"termsOfServiceAgreed": true, "contact": old})
				r := c.post(c.kid, tc.payload, jwsOpts{})
				if tc.wantType != "" {
					wantProblem(t, r, tc.wantStatus, tc.wantType)
				} else {
					if r.status != tc.wantStatus {
						t.Fatalf("update: %d %s", r.status, r.body)
					}
					if got := decodeAs[accountJSON](t, r).Contact; !slices.Equal(got, tc.wantContact) {
						t.Errorf("update answered contact %q, want %q", got, tc.wantContact)
					}
				}
				read := decodeAs[accountJSON](t, c.read(c.kid))
				if !slices.Equal(read.Contact, tc.wantContact) {
					t.Errorf("account now has contact %q, want %q", read.Contact, tc.wantContact)
				}
				if read.Status != "valid" {
					t.Errorf("account is %s", read.Status)
				}
			})
		}
	})
}

// RFC 8555 §7.3.6: "If a server receives a POST or POST-as-GET from a
// deactivated account, it MUST return an error response with status code
// 401 (Unauthorized) and type urn:ietf:params:acme:error:unauthorized."
func TestADeactivatedAccountIsRefusedWith401Unauthorized(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("d.example.com"))
		az := alice.authz(o.Authorizations[0])
		r := alice.post(alice.kid, map[string]string{"status": "deactivated"}, jwsOpts{})
		if r.status != http.StatusOK || decodeAs[accountJSON](t, r).Status != "deactivated" {
			t.Fatalf("deactivation: %d %s", r.status, r.body)
		}
		tests := []struct {
			name string
			do   func() rawResponse
		}{
			{"new-order", func() rawResponse {
				return alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("x.example.com")}}, jwsOpts{})
			}},
			{"account POST-as-GET", func() rawResponse { return alice.read(alice.kid) }},
			{"account update", func() rawResponse {
				return alice.post(alice.kid, map[string]any{"contact": []string{"mailto:a@example.com"}}, jwsOpts{})
			}},
			{"account deactivation again", func() rawResponse {
				return alice.post(alice.kid, map[string]string{"status": "deactivated"}, jwsOpts{})
			}},
			{"orders list", func() rawResponse { return alice.read(alice.kid + "/orders") }},
			{"order POST-as-GET", func() rawResponse { return alice.read(o.url) }},
			{"authorization POST-as-GET", func() rawResponse { return alice.read(o.Authorizations[0]) }},
			{"challenge POST", func() rawResponse { return alice.post(az.Challenges[0].URL, map[string]any{}, jwsOpts{}) }},
			{"key-change", func() rawResponse {
				nk := newKey(t)
				return alice.post(e.url("/key-change"), innerKeyChange(t, e, innerSpec{signer: nk, account: alice.kid, oldKey: alice.key.Public()}), jwsOpts{})
			}},
			{"new-account with the account's key", func() rawResponse {
				return alice.post(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				wantProblem(t, tc.do(), http.StatusUnauthorized, acme.ErrorUnauthorized)
			})
		}
	})
}

// RFC 8555 §7.3.6: a server "SHOULD cancel any pending operations
// authorized by the account's key": deactivating an account invalidates
// its pending and ready orders and deactivates their pending
// authorizations; another account's orders are untouched.
func TestDeactivatingAnAccountCancelsItsPendingOrdersAndAuthorizations(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice, bob := e.rawClient(), e.rawClient()
		alice.register()
		bob.register()
		pending := alice.order(dnsID("pending.example.com"))
		ready := alice.readyOrder("ready.example.com")
		bobs := bob.order(dnsID("bob.example.com"))
		if r := alice.post(alice.kid, map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("deactivation: %d %s", r.status, r.body)
		}
		ctx := t.Context()
		tests := []struct {
			name      string
			order     createdOrder
			wantOrder string
			wantAuthz string
		}{
			{"a pending order is invalid and its authorization deactivated", pending, "invalid", "deactivated"},
			{"a ready order is invalid and its valid authorization kept", ready, "invalid", "valid"},
			{"another account's pending order is untouched", bobs, "pending", "pending"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				o, err := e.db.GetOrder(ctx, "test", path.Base(tc.order.url))
				if err != nil {
					t.Fatal(err)
				}
				if string(o.Status) != tc.wantOrder {
					t.Errorf("order is %s; want %s", o.Status, tc.wantOrder)
				}
				a, err := e.db.GetAuthz(ctx, "test", path.Base(tc.order.Authorizations[0]))
				if err != nil {
					t.Fatal(err)
				}
				if string(a.Status) != tc.wantAuthz {
					t.Errorf("authorization is %s; want %s", a.Status, tc.wantAuthz)
				}
			})
		}
	})
}

// RFC 8555 §7.1.2.1: an account's orders URL lists that account's orders,
// and only them.
func TestAnAccountsOrdersListNamesItsOwnOrdersOnly(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice, bob, carol := e.rawClient(), e.rawClient(), e.rawClient()
		alice.register()
		bob.register()
		carol.register()
		aliceOrders := []string{alice.order(dnsID("a1.example.com")).url, alice.order(dnsID("a2.example.com")).url}
		bobOrders := []string{bob.order(dnsID("b1.example.com")).url}

		tests := []struct {
			name   string
			c      *rawClient
			want   []string
			status int
		}{
			{"alice sees her two orders", alice, aliceOrders, http.StatusOK},
			{"bob sees his one order", bob, bobOrders, http.StatusOK},
			{"an account without orders gets an empty array", carol, []string{}, http.StatusOK},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				acct := decodeAs[accountJSON](t, tc.c.read(tc.c.kid))
				if acct.Orders != tc.c.kid+"/orders" {
					t.Fatalf("account orders URL %q, want %q", acct.Orders, tc.c.kid+"/orders")
				}
				r := tc.c.read(acct.Orders)
				if r.status != tc.status {
					t.Fatalf("orders list: %d %s", r.status, r.body)
				}
				var list struct {
					Orders *[]string `json:"orders"`
				}
				if err := json.Unmarshal(r.body, &list); err != nil || list.Orders == nil {
					t.Fatalf("orders list %s has no orders array", r.body)
				}
				got, want := slices.Sorted(slices.Values(*list.Orders)), slices.Sorted(slices.Values(tc.want))
				if !slices.Equal(got, want) {
					t.Errorf("orders %q, want %q", got, want)
				}
			})
		}
		t.Run("alice may not read bob's list", func(t *testing.T) {
			wantProblem(t, alice.read(bob.kid+"/orders"), http.StatusForbidden, acme.ErrorUnauthorized)
		})
	})
}

// innerSpec describes the inner JWS of a key change (RFC 8555 §7.3.5).
type innerSpec struct {
	signer  crypto.Signer    // signs the inner JWS
	jwk     crypto.PublicKey // the jwk it carries; default signer's
	url     string           // default the key-change URL
	nonce   *string          // must be absent, even empty
	kid     string           // instead of jwk, when set
	account string
	oldKey  crypto.PublicKey
	payload string // overrides account/oldKey when set
}

func innerKeyChange(t testing.TB, e *testEnv, s innerSpec) []byte {
	t.Helper()
	if s.jwk == nil {
		s.jwk = s.signer.Public()
	}
	if s.url == "" {
		s.url = e.url("/key-change")
	}
	hdr := map[string]any{"alg": algOf(s.signer), "url": s.url}
	if s.kid != "" {
		hdr["kid"] = s.kid
	} else {
		hdr["jwk"] = jwkOf(t, s.jwk)
	}
	if s.nonce != nil {
		hdr["nonce"] = *s.nonce
	}
	payload := s.payload
	if payload == "" {
		payload = string(marshal(t, map[string]any{"account": s.account, "oldKey": jwkOf(t, s.oldKey)}))
	}
	return marshal(t, flatJWS(t, s.signer, hdr, payload))
}

// RFC 8555 §7.3.5: a key change signed by the account (outer) and the new
// key (inner) moves the account to the new key; the old key stops
// working and the new key identifies the account.
func TestAKeyChangeMovesTheAccountToTheNewKey(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		nk := newKey(t)
		r := alice.post(e.url("/key-change"), innerKeyChange(t, e, innerSpec{signer: nk, account: alice.kid, oldKey: alice.key.Public()}), jwsOpts{})
		if r.status != http.StatusOK {
			t.Fatalf("key-change: %d %s", r.status, r.body)
		}
		if loc := r.header.Get("Location"); loc != alice.kid {
			t.Errorf("key-change Location %q, want %q", loc, alice.kid)
		}
		renewed := &rawClient{t: t, e: e, key: nk, kid: alice.kid}

		t.Run("the old key no longer signs for the account", func(t *testing.T) {
			wantProblem(t, alice.read(alice.kid), http.StatusBadRequest, acme.ErrorMalformed)
		})
		t.Run("the new key signs for the account", func(t *testing.T) {
			if r := renewed.read(alice.kid); r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
		})
		t.Run("new-account finds the account by its new key", func(t *testing.T) {
			r := renewed.post(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{embedJWK: true})
			if r.status != http.StatusOK || r.header.Get("Location") != alice.kid {
				t.Fatalf("%d %q %s", r.status, r.header.Get("Location"), r.body)
			}
		})
		t.Run("new-account no longer finds it by the old key", func(t *testing.T) {
			r := alice.post(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{embedJWK: true})
			wantProblem(t, r, http.StatusBadRequest, acme.ErrorAccountDoesNotExist)
		})
	})
}

// Two instances share one store: what an account's key and status are is
// the store's answer at the moment a request's nonce is spent, even on an
// instance that verified the account's requests before (and remembers the
// key it verified them with).
func TestAnAccountChangeOnAnotherInstanceTakesEffectAtOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		dbPath := newPlace(t)
		a := newTestEnvWith(t, envOptions{dbPath: dbPath})
		b := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: a.ca})
		// onB is c's account as seen through instance b.
		onB := func(c *rawClient, key crypto.Signer) *rawClient {
			return &rawClient{t: t, e: b, key: key, kid: b.url("/account/" + path.Base(c.kid))}
		}

		t.Run("a key change", func(t *testing.T) {
			alice := a.rawClient()
			alice.register()
			aliceB := onB(alice, alice.key)
			if r := aliceB.read(aliceB.kid); r.status != http.StatusOK {
				t.Fatalf("before the key change, b answered %d %s", r.status, r.body)
			}
			nk := newKey(t)
			r := alice.post(a.url("/key-change"), innerKeyChange(t, a, innerSpec{signer: nk, account: alice.kid, oldKey: alice.key.Public()}), jwsOpts{})
			if r.status != http.StatusOK {
				t.Fatalf("key-change on a: %d %s", r.status, r.body)
			}
			wantProblem(t, aliceB.read(aliceB.kid), http.StatusBadRequest, acme.ErrorMalformed)
			if r := onB(alice, nk).read(aliceB.kid); r.status != http.StatusOK {
				t.Fatalf("the new key on b: %d %s", r.status, r.body)
			}
		})
		t.Run("a deactivation", func(t *testing.T) {
			bob := a.rawClient()
			bob.register()
			bobB := onB(bob, bob.key)
			if r := bobB.read(bobB.kid); r.status != http.StatusOK {
				t.Fatalf("before the deactivation, b answered %d %s", r.status, r.body)
			}
			if r := bob.post(bob.kid, map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
				t.Fatalf("deactivation on a: %d %s", r.status, r.body)
			}
			wantProblem(t, bobB.read(bobB.kid), http.StatusUnauthorized, acme.ErrorUnauthorized)
		})
	})
}

// RFC 8555 §7.3.5 lists what the server checks of a key change; each
// failed check leaves the account on its old key.
func TestAKeyChangeThatFailsACheckIsRefused(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice, bob := e.rawClient(), e.rawClient()
		alice.register()
		bob.register()
		nk, stranger := newKey(t), newKey(t)
		ok := innerSpec{signer: nk, account: alice.kid, oldKey: alice.key.Public()}
		with := func(f func(*innerSpec)) innerSpec { s := ok; f(&s); return s }

		tests := []struct {
			name       string
			inner      innerSpec
			wantStatus int
			wantType   acme.ProblemType
			wantLoc    string
		}{
			{"fail/the inner url is not the outer url", with(func(s *innerSpec) { s.url = e.url("/new-account") }), 401, acme.ErrorUnauthorized, ""},
			{"fail/the inner JWS has a nonce", with(func(s *innerSpec) { s.nonce = strp(alice.nonce()) }), 400, acme.ErrorMalformed, ""},
			// "The inner JWS MUST omit the "nonce" header parameter": an
			// empty one is not omitted.
			{"fail/the inner JWS has an empty nonce", with(func(s *innerSpec) { s.nonce = strp("") }), 400, acme.ErrorMalformed, ""},
			{"fail/the inner JWS names its key by kid", with(func(s *innerSpec) { s.kid = alice.kid }), 400, acme.ErrorMalformed, ""},
			{"fail/the inner JWS is signed by a key other than its jwk", with(func(s *innerSpec) { s.jwk = stranger.Public() }), 400, acme.ErrorMalformed, ""},
			{"fail/oldKey is not the account's key", with(func(s *innerSpec) { s.oldKey = stranger.Public() }), 403, acme.ErrorUnauthorized, ""},
			{"fail/the inner account is another account", with(func(s *innerSpec) { s.account = bob.kid }), 403, acme.ErrorUnauthorized, ""},
			{"fail/the inner payload is not a key-change object", with(func(s *innerSpec) { s.payload = `["x"]` }), 400, acme.ErrorMalformed, ""},
			{"fail/the new key is the current key", with(func(s *innerSpec) { s.signer = alice.key }), 400, acme.ErrorMalformed, ""},
			// "If there is an existing account with the new key provided, then
			// the server SHOULD use status code 409 (Conflict) and provide the
			// URL of that account in the Location header field."
			{"fail/the new key belongs to another account", with(func(s *innerSpec) { s.signer = bob.key }), 409, acme.ErrorMalformed, bob.kid},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := alice.post(e.url("/key-change"), innerKeyChange(t, e, tc.inner), jwsOpts{})
				wantProblem(t, r, tc.wantStatus, tc.wantType)
				if tc.wantLoc != "" && r.header.Get("Location") != tc.wantLoc {
					t.Errorf("Location %q, want %q", r.header.Get("Location"), tc.wantLoc)
				}
				if r := alice.read(alice.kid); r.status != http.StatusOK {
					t.Fatalf("the old key stopped working after a refused key change: %d %s", r.status, r.body)
				}
			})
		}
	})
}

// withMembers is the JWK of pub with extra members beside the key's own.
func withMembers(t testing.TB, pub crypto.PublicKey, extra map[string]any) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(jwkOf(t, pub), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// A JWK may carry members beside its key (kid, use, alg, x5t…), as many
// as a request's size allows; none is part of the key (RFC 7638 leaves
// them out of the thumbprint). An account keeps its key and nothing
// else, whichever way the key arrived.
func TestAnAccountStoresOnlyTheKeyOfTheJWKItWasSentWith(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		extra := map[string]any{
			"kid": strings.Repeat("k", 30000), "use": "sig", "alg": "ES256",
			"x5t": b64(bytes.Repeat([]byte{1}, 20)), "unknown": strings.Repeat("u", 1000),
		}
		storedKey := func(t *testing.T, kid string) []byte {
			t.Helper()
			a, err := e.db.GetAccount(t.Context(), "test", path.Base(kid))
			if err != nil {
				t.Fatal(err)
			}
			return a.KeyJWK
		}
		tests := []struct {
			name string
			// send makes an account whose key arrives with extra members
			// and returns its URL and key.
			send func(t *testing.T) (string, crypto.Signer)
		}{
			{"ok/new-account", func(t *testing.T) (string, crypto.Signer) {
				c := e.rawClient()
				r := c.post(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true},
					jwsOpts{extra: map[jose.HeaderKey]any{"jwk": withMembers(t, c.key.Public(), extra)}})
				if r.status != http.StatusCreated {
					t.Fatalf("new-account: %d %s", r.status, r.body)
				}
				return r.header.Get("Location"), c.key
			}},
			{"ok/key-change", func(t *testing.T) (string, crypto.Signer) {
				c := e.rawClient()
				c.register()
				nk := newKey(t)
				hdr := map[string]any{"alg": "ES256", "url": e.url("/key-change"), "jwk": withMembers(t, nk.Public(), extra)}
				payload := marshal(t, map[string]any{"account": c.kid, "oldKey": jwkOf(t, c.key.Public())})
				r := c.post(e.url("/key-change"), marshal(t, flatJWS(t, nk, hdr, string(payload))), jwsOpts{})
				if r.status != http.StatusOK {
					t.Fatalf("key-change: %d %s", r.status, r.body)
				}
				return c.kid, nk
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				kid, key := tc.send(t)
				if got, want := storedKey(t, kid), jwkOf(t, key.Public()); !bytes.Equal(got, want) {
					t.Errorf("stored key (%d bytes) %.200s, want %s", len(got), got, want)
				}
				c := &rawClient{t: t, e: e, key: key, kid: kid}
				if r := c.read(kid); r.status != http.StatusOK {
					t.Fatalf("the account's key signs no more: %d %s", r.status, r.body)
				}
			})
		}
	})
}

// ---- orders and authorizations ----

// RFC 8555 §7.1.3, §7.4: a new order echoes the requested notBefore and
// notAfter; dates that are not RFC 3339, make no sense or ask for a window
// the signer would not issue exactly (the test CA's leaves live a day) are
// malformed, before the client proves anything.
func TestANewOrderEchoesItsValidityAndRefusesABadOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		now := time.Now().UTC().Truncate(time.Second)
		nb, na := now.Add(time.Hour).Format(time.RFC3339), now.Add(20*time.Hour).Format(time.RFC3339)
		tests := []struct {
			name      string
			nb, na    string
			wantError bool
			detail    string // in the problem, when wantError
		}{
			{name: "ok/notBefore and notAfter are echoed", nb: nb, na: na},
			{name: "ok/notAfter alone is echoed", na: na},
			{name: "ok/neither is sent and neither is shown"},
			{name: "fail/notAfter is not an RFC 3339 date-time", na: "tomorrow", wantError: true},
			{name: "fail/notBefore is a date without a time", nb: "2030-01-01", wantError: true},
			{name: "fail/notAfter is in the past", na: now.Add(-time.Hour).Format(time.RFC3339), wantError: true},
			{name: "fail/notAfter is before notBefore", nb: na, na: nb, wantError: true},
			{name: "fail/a window longer than the signer's certificates", nb: nb, na: now.Add(48 * time.Hour).Format(time.RFC3339),
				wantError: true, detail: "issues certificates valid for at most 24h0m0s"},
			{name: "fail/a notAfter beyond the signer's lifetime from now", na: now.Add(30 * 24 * time.Hour).Format(time.RFC3339),
				wantError: true, detail: "valid for at most 24h0m0s"},
			{name: "fail/a notBefore an hour in the past", nb: now.Add(-time.Hour).Format(time.RFC3339),
				wantError: true, detail: "does not backdate"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				p := map[string]any{"identifiers": []map[string]string{dnsID("v.example.com")}}
				if tc.nb != "" {
					p["notBefore"] = tc.nb
				}
				if tc.na != "" {
					p["notAfter"] = tc.na
				}
				r := alice.post(e.url("/new-order"), p, jwsOpts{})
				if tc.wantError {
					wantProblem(t, r, http.StatusBadRequest, acme.ErrorMalformed)
					if !bytes.Contains(r.body, []byte(tc.detail)) {
						t.Errorf("the problem does not say %q: %s", tc.detail, r.body)
					}
					return
				}
				if r.status != http.StatusCreated {
					t.Fatalf("%d %s", r.status, r.body)
				}
				o := decodeAs[orderJSON](t, r)
				if o.NotBefore != tc.nb || o.NotAfter != tc.na {
					t.Errorf("order has notBefore %q notAfter %q, want %q %q", o.NotBefore, o.NotAfter, tc.nb, tc.na)
				}
				if tc.nb == "" && bytes.Contains(r.body, []byte(`"notBefore"`)) {
					t.Errorf("order shows a notBefore nobody asked for: %s", r.body)
				}
			})
		}
	})
}

// RFC 8555 §7.4: one authorization per distinct identifier. Names differ
// only in case, and an IPv4-mapped IPv6 address is its IPv4 address; a
// wildcard and its base name are distinct.
func TestANewOrderDeduplicatesItsIdentifiers(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("a.example.com"), dnsID("A.EXAMPLE.com"), ipID("192.0.2.1"), ipID("::ffff:192.0.2.1"),
			dnsID("b.example.com"), dnsID("a.example.com"), dnsID("*.example.com"), dnsID("example.com"))
		want := []string{"dns:a.example.com", "ip:192.0.2.1", "dns:b.example.com", "dns:*.example.com", "dns:example.com"}
		var got []string
		for _, id := range o.Identifiers {
			got = append(got, id.Type+":"+id.Value)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("identifiers %q, want %q", got, want)
		}
		if len(o.Authorizations) != len(want) {
			t.Fatalf("%d authorizations for %d identifiers", len(o.Authorizations), len(want))
		}
		var authzIDs []string
		for _, u := range o.Authorizations {
			a := alice.authz(u)
			id := a.Identifier.Type + ":" + a.Identifier.Value
			if a.Wildcard {
				id = a.Identifier.Type + ":*." + a.Identifier.Value
			}
			authzIDs = append(authzIDs, id)
		}
		if !slices.Equal(slices.Sorted(slices.Values(authzIDs)), slices.Sorted(slices.Values(want))) {
			t.Errorf("authorizations are for %q, want %q", authzIDs, want)
		}
	})
}

// RFC 8555 §7.1.3, §7.1.4: a wildcard order keeps "*." in its identifiers;
// its authorization is for the base name with wildcard: true, and only
// dns-01 can prove it (§8.4, §7.1.4: wildcard "MUST be absent" otherwise).
func TestAWildcardOrderOffersOnlyDNS01ForTheBaseName(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("*.example.com"), dnsID("plain.example.com"))
		if len(o.Identifiers) != 2 || o.Identifiers[0].Value != "*.example.com" {
			t.Fatalf("order identifiers %+v", o.Identifiers)
		}
		for _, u := range o.Authorizations {
			r := alice.read(u)
			a := decodeAs[authzJSON](t, r)
			var types []string
			for _, ch := range a.Challenges {
				types = append(types, ch.Type)
			}
			switch a.Identifier.Value {
			case "example.com":
				if !a.Wildcard {
					t.Errorf("the wildcard's authorization lacks wildcard: true: %s", r.body)
				}
				if !slices.Equal(types, []string{acme.ChallengeDNS01}) {
					t.Errorf("the wildcard's authorization offers %q, want only dns-01", types)
				}
			case "plain.example.com":
				if bytes.Contains(r.body, []byte(`"wildcard"`)) {
					t.Errorf("a non-wildcard authorization has a wildcard field: %s", r.body)
				}
				if !slices.Contains(types, acme.ChallengeHTTP01) {
					t.Errorf("a plain name is offered %q", types)
				}
			default:
				t.Errorf("unexpected authorization for %+v", a.Identifier)
			}
		}
	})
}

// RFC 8738 §3, §7: an IP identifier is authorized by http-01 or
// tls-alpn-01, never dns-01, and shown in canonical form.
func TestAnIPIdentifierIsNotOfferedDNS01(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		for _, tc := range []struct{ in, want string }{{"192.0.2.1", "192.0.2.1"}, {"2001:DB8:0:0::1", "2001:db8::1"}} {
			t.Run(tc.in, func(t *testing.T) {
				o := alice.order(ipID(tc.in))
				a := alice.authz(o.Authorizations[0])
				if a.Identifier.Type != acme.IdentifierIP || a.Identifier.Value != tc.want {
					t.Errorf("authorization identifier %+v, want ip %s", a.Identifier, tc.want)
				}
				if len(a.Challenges) == 0 {
					t.Fatal("no challenges offered")
				}
				for _, ch := range a.Challenges {
					if ch.Type == acme.ChallengeDNS01 {
						t.Errorf("dns-01 offered for an IP address")
					}
				}
			})
		}
	})
}

// RFC 8555 §6.7.1, §7.4: an order refused for some of its identifiers
// answers with one subproblem per refused identifier, each naming it.
func TestAPolicyRefusalHasOneSubproblemPerRefusedIdentifier(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, func(c *ProfileConfig) {
			c.Allow = &IdentifierPolicy{Domains: []string{".example.com"}, IPRanges: []string{"192.0.2.0/24"}}
			c.Deny = &IdentifierPolicy{Domains: []string{"secret.example.com"}}
		})
		alice := e.rawClient()
		alice.register()
		type sub struct {
			value string
			typ   acme.ProblemType
		}
		tests := []struct {
			name string
			ids  []map[string]string
			want []sub // nil: accepted
		}{
			{"ok/allowed names and addresses", []map[string]string{dnsID("a.example.com"), ipID("192.0.2.5")}, nil},
			{"fail/one denied name among allowed ones", []map[string]string{dnsID("ok.example.com"), dnsID("secret.example.com")},
				[]sub{{"secret.example.com", acme.ErrorRejectedIdentifier}}},
			{"fail/two refused names get two subproblems", []map[string]string{dnsID("a.example.com"), dnsID("secret.example.com"), dnsID("other.net")},
				[]sub{{"secret.example.com", acme.ErrorRejectedIdentifier}, {"other.net", acme.ErrorRejectedIdentifier}}},
			{"fail/a refused address and an unsupported type", []map[string]string{ipID("198.51.100.1"), {"type": "email", "value": "a@example.com"}},
				[]sub{{"198.51.100.1", acme.ErrorRejectedIdentifier}, {"a@example.com", acme.ErrorUnsupportedIdentifier}}},
			{"fail/a malformed name and a denied one", []map[string]string{dnsID("bad..example.com"), dnsID("secret.example.com")},
				[]sub{{"bad..example.com", acme.ErrorRejectedIdentifier}, {"secret.example.com", acme.ErrorRejectedIdentifier}}},
			// A client finds its refused identifiers among those it sent:
			// a subproblem names each as sent, not as normalized.
			{"fail/a denied name sent in upper case is named as sent", []map[string]string{dnsID("ok.example.com"), dnsID("SECRET.Example.com")},
				[]sub{{"SECRET.Example.com", acme.ErrorRejectedIdentifier}}},
			{"fail/a refused address sent IPv4-mapped is named as sent", []map[string]string{ipID("::ffff:198.51.100.1")},
				[]sub{{"::ffff:198.51.100.1", acme.ErrorRejectedIdentifier}}},
			{"fail/a refused wildcard sent in upper case is named as sent", []map[string]string{dnsID("*.Other.NET")},
				[]sub{{"*.Other.NET", acme.ErrorRejectedIdentifier}}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := alice.post(e.url("/new-order"), map[string]any{"identifiers": tc.ids}, jwsOpts{})
				if tc.want == nil {
					if r.status != http.StatusCreated {
						t.Fatalf("%d %s", r.status, r.body)
					}
					return
				}
				if r.status != http.StatusBadRequest || r.problem == nil {
					t.Fatalf("got %d %s, want a 400 problem", r.status, r.body)
				}
				var got []sub
				for _, s := range r.problem.Subproblems {
					if s.Identifier == nil {
						t.Fatalf("subproblem without identifier: %s", r.body)
					}
					got = append(got, sub{s.Identifier.Value, s.Type})
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("subproblems %v, want %v", got, tc.want)
				}
			})
		}
	})
}

// RFC 8555 §7.5.2, §7.1.6: a deactivated authorization makes its order
// invalid, whether the order was pending or ready.
func TestDeactivatingAnAuthorizationInvalidatesItsOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice, bob := e.rawClient(), e.rawClient()
		alice.register()
		bob.register()
		deactivate := map[string]string{"status": "deactivated"}

		t.Run("a pending order", func(t *testing.T) {
			o := alice.order(dnsID("p1.example.com"), dnsID("p2.example.com"))
			r := alice.post(o.Authorizations[0], deactivate, jwsOpts{})
			if r.status != http.StatusOK || decodeAs[authzJSON](t, r).Status != "deactivated" {
				t.Fatalf("deactivation: %d %s", r.status, r.body)
			}
			if st := decodeAs[orderJSON](t, alice.read(o.url)).Status; st != "invalid" {
				t.Errorf("order is %s, want invalid", st)
			}
			if st := alice.authz(o.Authorizations[1]).Status; st != "pending" {
				t.Errorf("the other authorization is %s, want pending", st)
			}
			wantProblem(t, alice.post(o.Authorizations[0], deactivate, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
		})
		t.Run("a ready order", func(t *testing.T) {
			o := alice.readyOrder("r.example.com")
			r := alice.post(o.Authorizations[0], deactivate, jwsOpts{})
			if r.status != http.StatusOK {
				t.Fatalf("deactivation of a valid authorization: %d %s", r.status, r.body)
			}
			if st := decodeAs[orderJSON](t, alice.read(o.url)).Status; st != "invalid" {
				t.Errorf("order is %s, want invalid", st)
			}
			certKey := newKey(t)
			wantProblem(t, alice.finalize(o, newCSR(t, certKey, "", []string{"r.example.com"}, nil)), http.StatusForbidden, acme.ErrorOrderNotReady)
		})
		t.Run("another account's authorization", func(t *testing.T) {
			o := alice.order(dnsID("o.example.com"))
			wantProblem(t, bob.post(o.Authorizations[0], deactivate, jwsOpts{}), http.StatusForbidden, acme.ErrorUnauthorized)
			if st := alice.authz(o.Authorizations[0]).Status; st != "pending" {
				t.Errorf("authorization is %s after another account's attempt", st)
			}
		})
		t.Run("any other status is malformed", func(t *testing.T) {
			o := alice.order(dnsID("m.example.com"))
			wantProblem(t, alice.post(o.Authorizations[0], map[string]string{"status": "valid"}, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
		})
	})
}

// RFC 8555 §7.5.1: a POST {} to a challenge starts validation and answers
// with the challenge (processing or already valid) and Link rel="up" to
// its authorization; a second POST after validation answers the current
// state.
func TestAChallengePOSTStartsValidationAndLinksUpToItsAuthorization(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("c.example.com"))
		az := o.Authorizations[0]
		ch, r := alice.answerHTTP01(az, "")
		if r.status != http.StatusOK {
			t.Fatalf("challenge POST: %d %s", r.status, r.body)
		}
		got := decodeAs[challengeJSON](t, r)
		if got.Status != "processing" && got.Status != "valid" {
			t.Errorf("challenge POST answered status %q, want processing or valid", got.Status)
		}
		if got.URL != ch.URL || got.Token != ch.Token || got.Type != acme.ChallengeHTTP01 {
			t.Errorf("challenge POST answered %+v, want the challenge %+v", got, ch)
		}
		if up := linkWithRel(r, "up"); up != az {
			t.Errorf("Link rel=up %q, want %q", up, az)
		}
		if !e.hasIndexLink(r) {
			t.Errorf("no index Link: %q", r.header.Values("Link"))
		}
		alice.await(az, "valid")

		again := alice.post(ch.URL, map[string]any{}, jwsOpts{})
		if again.status != http.StatusOK {
			t.Fatalf("second challenge POST: %d %s", again.status, again.body)
		}
		now := decodeAs[challengeJSON](t, again)
		if now.Status != "valid" || now.Validated == "" {
			t.Errorf("second POST answered %+v, want valid with a validated time", now)
		}
		if _, err := time.Parse(time.RFC3339, now.Validated); err != nil {
			t.Errorf("validated %q is not RFC 3339", now.Validated)
		}
		if up := linkWithRel(again, "up"); up != az {
			t.Errorf("second POST Link rel=up %q, want %q", up, az)
		}
		if st := decodeAs[orderJSON](t, alice.read(o.url)).Status; st != "ready" {
			t.Errorf("order is %s, want ready", st)
		}
	})
}

// RFC 8555 §8.3, §7.1.6: a wrong http-01 answer makes the challenge, its
// authorization and the order invalid, with the problem (incorrectResponse,
// naming the identifier) recorded on the challenge.
func TestAWrongHTTP01AnswerInvalidatesChallengeAuthorizationAndOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("wrong.example.com"), dnsID("other.example.com"))
		var az string
		for _, u := range o.Authorizations {
			if alice.authz(u).Identifier.Value == "wrong.example.com" {
				az = u
			}
		}
		ch, r := alice.answerHTTP01(az, "this is not the key authorization")
		if r.status != http.StatusOK {
			t.Fatalf("challenge POST: %d %s", r.status, r.body)
		}
		alice.await(az, "invalid")

		c := decodeAs[challengeJSON](t, alice.read(ch.URL))
		if c.Status != "invalid" {
			t.Errorf("challenge is %s, want invalid", c.Status)
		}
		if c.Validated != "" {
			t.Errorf("an invalid challenge has validated %q", c.Validated)
		}
		var p problem.Problem
		if err := json.Unmarshal(c.Error, &p); err != nil {
			t.Fatalf("challenge error %s: %v", c.Error, err)
		}
		if p.Type != acme.ErrorIncorrectResponse {
			t.Errorf("challenge error type %s, want %s", p.Type, acme.ErrorIncorrectResponse)
		}
		if p.Identifier == nil || p.Identifier.Type != "dns" || p.Identifier.Value != "wrong.example.com" {
			t.Errorf("challenge error identifier %+v, want dns wrong.example.com", p.Identifier)
		}
		if strings.Contains(string(c.Error), "this is not the key authorization") {
			t.Errorf("the problem echoes the fetched body: %s", c.Error)
		}
		order := decodeAs[orderJSON](t, alice.read(o.url))
		if order.Status != "invalid" || len(order.Error) == 0 {
			t.Errorf("order is %s with error %s, want invalid with an error", order.Status, order.Error)
		}
		// A challenge of an invalid authorization cannot be retried.
		if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status == http.StatusOK && decodeAs[challengeJSON](t, r).Status != "invalid" {
			t.Errorf("retrying the challenge answered %s", r.body)
		}
	})
}

// RFC 8555 §7.1.4: a pending authorization lists every challenge the
// client may answer; a valid one only the challenge that was validated,
// an invalid one only the challenge that was attempted and failed.
func TestAFinishedAuthorizationListsOnlyTheChallengeThatDecidedIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		tests := []struct {
			name   string
			answer string // "" for the right key authorization
			want   string
		}{
			{"a valid authorization shows its validated challenge", "", "valid"},
			{"an invalid authorization shows its failed challenge", "not the key authorization", "invalid"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				o := alice.order(dnsID(tc.want + ".example.com"))
				az := o.Authorizations[0]
				if pending := alice.authz(az); pending.Status != "pending" || len(pending.Challenges) < 2 {
					t.Fatalf("a new authorization is %s with %d challenges; want pending with several", pending.Status, len(pending.Challenges))
				}
				ch, r := alice.answerHTTP01(az, tc.answer)
				if r.status != http.StatusOK {
					t.Fatalf("challenge POST: %d %s", r.status, r.body)
				}
				alice.await(az, tc.want)
				done := alice.authz(az)
				if len(done.Challenges) != 1 || done.Challenges[0].URL != ch.URL || string(done.Challenges[0].Status) != tc.want {
					t.Errorf("the %s authorization lists %+v; want only its http-01 challenge, %s", tc.want, done.Challenges, tc.want)
				}
			})
		}
	})
}

// ---- finalize and certificates ----

// RFC 8555 §7.4 and the design's guarded writes: of concurrent finalizes
// of one ready order exactly one signs; the others get orderNotReady and
// the order keeps one certificate. The server's clock is a claimGate, so
// every finalize has read the order ready before any claims it: only the
// claim's own guard can then tell the winner.
func TestConcurrentFinalizesOfOneOrderIssueOneCertificate(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		gate := &claimGate{Clock: clock.Real()}
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = gate }})
		alice := e.rawClient()
		alice.register()
		const racers = 4
		for round := range 3 {
			o := alice.readyOrder("race.example.com")
			keys := make([]*ecdsa.PrivateKey, racers)
			bodies := make([][]byte, racers)
			for i := range racers {
				keys[i] = newKey(t)
				bodies[i] = alice.sign(o.Finalize, marshal(t, map[string]string{"csr": b64(newCSR(t, keys[i], "", []string{"race.example.com"}, nil))}), jwsOpts{})
			}
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				resps = make([]*http.Response, racers)
				errs  = make([]error, racers)
			)
			gate.expect(racers)
			for i := range racers {
				wg.Go(func() {
					<-start
					resps[i], errs[i] = e.ts.Client().Post(o.Finalize, "application/jose+json", bytes.NewReader(bodies[i]))
					gate.finished()
				})
			}
			close(start)
			wg.Wait()
			if n := gate.claimed(); n != racers {
				t.Fatalf("round %d: %d of %d finalizes reached their claim together; the gate looks for the clock reading of the claim in authority.Finalize", round, n, racers)
			}
			winner := -1
			for i := range racers {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				r := readResponse(t, resps[i])
				switch {
				case r.status == http.StatusOK:
					if winner >= 0 {
						t.Fatalf("round %d: finalizes %d and %d both succeeded", round, winner, i)
					}
					winner = i
					if got := decodeAs[orderJSON](t, r); got.Status != "valid" || got.Certificate == "" {
						t.Errorf("round %d: the winning finalize answered %s", round, r.body)
					}
				case r.problem != nil && r.problem.Type == acme.ErrorOrderNotReady && r.status == http.StatusForbidden:
				default:
					t.Errorf("round %d: a losing finalize answered %d %s, want 403 orderNotReady", round, r.status, r.body)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no finalize succeeded", round)
			}
			first := decodeAs[orderJSON](t, alice.read(o.url))
			second := decodeAs[orderJSON](t, alice.read(o.url))
			if first.Status != "valid" || first.Certificate == "" || first.Certificate != second.Certificate {
				t.Fatalf("round %d: order reads %s %q then %q", round, first.Status, first.Certificate, second.Certificate)
			}
			chain := alice.read(first.Certificate)
			leaf := firstCertificate(t, chain.body)
			want, _ := x509.MarshalPKIXPublicKey(keys[winner].Public())
			if !bytes.Equal(leaf.RawSubjectPublicKeyInfo, want) {
				t.Errorf("round %d: the certificate is not for the winning CSR's key", round)
			}
		}
	})
}

// claimGate is a server clock for a race of finalizes. When
// authority.Finalize reads it for the time of its claim — after reading the
// order and finding it ready — the request waits at the gate until every
// racer expected has arrived there or finished without arriving; then
// all go on at once. So every finalize has passed the status check before
// any claims the order, the interleaving the claim's guard must settle.
type claimGate struct {
	clock.Clock
	mu       sync.Mutex
	expected int           // racers of this round neither arrived nor finished
	arrived  int           // racers of this round that reached their claim
	open     chan struct{} // closed when no racer is left to wait for
}

// expect arms the gate for a round of n racers.
func (g *claimGate) expect(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expected, g.arrived, g.open = n, 0, make(chan struct{})
}

// finished tells the gate that a racer's request has been answered: one
// answered before the gate opened never reached its claim.
func (g *claimGate) finished() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaveLocked()
}

// claimed is how many racers of the round reached their claim.
func (g *claimGate) claimed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

func (g *claimGate) leaveLocked() {
	if g.expected == 0 {
		return // open already, or not armed
	}
	if g.expected--; g.expected == 0 {
		close(g.open)
	}
}

func (g *claimGate) Now() time.Time {
	if callerIs(".(*Authority).Finalize") {
		g.mu.Lock()
		open := g.open
		if g.expected > 0 {
			g.arrived++
			g.leaveLocked()
		}
		g.mu.Unlock()
		if open != nil {
			<-open
		}
	}
	return g.Clock.Now()
}

// callerIs reports whether the function calling the caller of callerIs
// has a name ending in suffix.
func callerIs(suffix string) bool {
	pcs := make([]uintptr, 3)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)]) // from callerIs's caller on
	frames.Next()
	f, _ := frames.Next()
	return strings.HasSuffix(f.Function, suffix)
}

func firstCertificate(t testing.TB, chain []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(chain)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate chain: %s", chain)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RFC 8555 §7.4 (finalize only from ready, else 403 orderNotReady),
// §7.4.2 (certificate download: POST-as-GET, application/pem-certificate-
// chain, end-entity first), §6.3 (reads take an empty payload).
func TestAnIssuedOrderServesItsCertificateToItsAccountOnly(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice, bob := e.rawClient(), e.rawClient()
		alice.register()
		bob.register()
		o := alice.readyOrder("cert.example.com", "www.cert.example.com")
		certKey := newKey(t)
		r := alice.finalize(o, newCSR(t, certKey, "", []string{"cert.example.com", "www.cert.example.com"}, nil))
		if r.status != http.StatusOK {
			t.Fatalf("finalize: %d %s", r.status, r.body)
		}
		issued := decodeAs[orderJSON](t, r)
		if issued.Status != "valid" || !strings.HasPrefix(issued.Certificate, e.url("/cert/")) {
			t.Fatalf("finalize answered %s", r.body)
		}
		if loc := r.header.Get("Location"); loc != o.url {
			t.Errorf("finalize Location %q, want the order %q", loc, o.url)
		}

		t.Run("the chain is PEM, leaf first, and chains to the CA", func(t *testing.T) {
			r := alice.read(issued.Certificate)
			if r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/pem-certificate-chain" {
				t.Errorf("Content-Type %q", ct)
			}
			if r.header.Get("Replay-Nonce") == "" || !e.hasIndexLink(r) {
				t.Errorf("no Replay-Nonce or index Link: %v", r.header)
			}
			var certs []*x509.Certificate
			rest := r.body
			for len(bytes.TrimSpace(rest)) > 0 {
				var block *pem.Block
				block, rest = pem.Decode(rest)
				if block == nil || block.Type != "CERTIFICATE" {
					t.Fatalf("the chain holds something other than CERTIFICATE blocks: %s", r.body)
				}
				c, err := x509.ParseCertificate(block.Bytes)
				if err != nil {
					t.Fatal(err)
				}
				certs = append(certs, c)
			}
			if len(certs) == 0 {
				t.Fatal("empty chain")
			}
			leaf := certs[0]
			if leaf.IsCA {
				t.Errorf("the first certificate is a CA")
			}
			names := slices.Sorted(slices.Values(leaf.DNSNames))
			if !slices.Equal(names, []string{"cert.example.com", "www.cert.example.com"}) {
				t.Errorf("leaf names %q", names)
			}
			want, _ := x509.MarshalPKIXPublicKey(certKey.Public())
			if !bytes.Equal(leaf.RawSubjectPublicKeyInfo, want) {
				t.Errorf("leaf key is not the CSR's")
			}
			roots, inter := x509.NewCertPool(), x509.NewCertPool()
			roots.AddCert(e.root)
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "www.cert.example.com"}); err != nil {
				t.Errorf("leaf does not verify: %v", err)
			}
		})
		t.Run("another account may not download it", func(t *testing.T) {
			wantProblem(t, bob.read(issued.Certificate), http.StatusForbidden, acme.ErrorUnauthorized)
		})
		t.Run("another account may not read the order", func(t *testing.T) {
			wantProblem(t, bob.read(o.url), http.StatusForbidden, acme.ErrorUnauthorized)
		})
		t.Run("a certificate read with a payload is malformed", func(t *testing.T) {
			wantProblem(t, alice.post(issued.Certificate, map[string]any{}, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
		})
		t.Run("an order read with a payload is malformed", func(t *testing.T) {
			wantProblem(t, alice.post(o.url, map[string]any{}, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
		})
		t.Run("finalizing the valid order again is orderNotReady", func(t *testing.T) {
			r := alice.finalize(o, newCSR(t, newKey(t), "", []string{"cert.example.com", "www.cert.example.com"}, nil))
			wantProblem(t, r, http.StatusForbidden, acme.ErrorOrderNotReady)
			if got := decodeAs[orderJSON](t, alice.read(o.url)); got.Certificate != issued.Certificate {
				t.Errorf("the order's certificate changed from %q to %q", issued.Certificate, got.Certificate)
			}
		})
	})
}

// BRs §6.1.6 / RFC 8032 §5.1.7: a certificate key must be a real key. The
// Ed25519 identity point "verifies" a signature (R = identity, s = 0) over
// any message, so anyone could sign with it; a CSR carrying it proves
// nothing and must be refused (go-jose refuses it as an account key).
func TestFinalizeRefusesAnEd25519KeyThatVerifiesEverySignature(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.readyOrder("weak.example.com")
		csr := newCSR(t, identityEd25519(), "", []string{"weak.example.com"}, nil)
		wantProblem(t, alice.finalize(o, csr), http.StatusBadRequest, acme.ErrorBadCSR)
	})
}

// ---- the JWS member names ----

// RFC 7515 §7.2.1: the flattened JWS has one "protected" member, the
// header the signature covers. A decoder that folds case lets a second,
// unsigned "Protected" member stand in for it, with a fresh nonce and a
// new url: a captured request could then be replayed (§6.5) anywhere
// (§6.4). Here Alice's authorization deactivation is replayed against her
// account.
func TestASecondProtectedMemberCannotReplaceTheSignedHeader(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("replay.example.com"))
		captured := alice.sign(o.Authorizations[0], marshal(t, map[string]string{"status": "deactivated"}), jwsOpts{})
		if r := alice.postRaw(o.Authorizations[0], "application/jose+json", captured); r.status != http.StatusOK {
			t.Fatalf("the original request: %d %s", r.status, r.body)
		}
		smuggled := appendMember(t, captured, "Protected",
			b64(marshal(t, map[string]any{"alg": "ES256", "kid": alice.kid, "nonce": alice.nonce(), "url": alice.kid})))
		r := alice.postRaw(alice.kid, "application/jose+json", smuggled)
		if r.status < 400 {
			t.Errorf("the replayed request was accepted: %d %s", r.status, r.body)
		}
		if after := alice.read(alice.kid); after.status != http.StatusOK || decodeAs[accountJSON](t, after).Status != "valid" {
			t.Errorf("Alice's account is no longer usable after a replay of her authorization deactivation: %d %s", after.status, after.body)
		}
	})
}

// RFC 8555 §6.2 requires the protected header to carry "alg", "nonce",
// "url" and one of "jwk"/"kid"; JOSE member names are case-sensitive
// (RFC 7515 §4, RFC 8259 §8.3), so "URL" is not "url".
func TestProtectedHeaderMemberNamesAreCaseSensitive(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		tests := []struct {
			name       string
			target     string
			hdr        func() map[string]any
			payload    string // what an accepted request would act on
			wantStatus int
			wantType   acme.ProblemType
		}{
			{"fail/url spelled URL", alice.kid, func() map[string]any {
				return map[string]any{"alg": "ES256", "kid": alice.kid, "nonce": alice.nonce(), "URL": alice.kid}
			}, "", 400, acme.ErrorMalformed},
			{"fail/nonce spelled Nonce", alice.kid, func() map[string]any {
				return map[string]any{"alg": "ES256", "kid": alice.kid, "Nonce": alice.nonce(), "url": alice.kid}
			}, "", 400, acme.ErrorBadNonce},
			{"fail/kid spelled KID", alice.kid, func() map[string]any {
				return map[string]any{"alg": "ES256", "KID": alice.kid, "nonce": alice.nonce(), "url": alice.kid}
			}, "", 400, acme.ErrorMalformed},
			{"fail/jwk spelled JWK", e.url("/new-account"), func() map[string]any {
				return map[string]any{"alg": "ES256", "JWK": jwkOf(t, alice.key.Public()), "nonce": alice.nonce(), "url": e.url("/new-account")}
			}, `{"onlyReturnExisting":true}`, 400, acme.ErrorMalformed},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				body := marshal(t, flatJWS(t, alice.key, tc.hdr(), tc.payload))
				wantProblem(t, alice.postRaw(tc.target, "application/jose+json", body), tc.wantStatus, tc.wantType)
			})
		}
	})
}
