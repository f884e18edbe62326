package acmeproxy

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/crypto/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// rawClient speaks ACME by hand, so tests can send what real clients never
// would.
type rawClient struct {
	t   testing.TB
	e   *testEnv
	key crypto.Signer
	kid string
}

func (e *testEnv) rawClient() *rawClient {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	return &rawClient{t: e.t, e: e, key: key}
}

func (e *testEnv) url(path string) string { return e.ts.URL + e.srv.Prefix() + path }

func (c *rawClient) nonce() string {
	c.t.Helper()
	resp, err := c.e.ts.Client().Head(c.e.url("/new-nonce"))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Header.Get("Replay-Nonce")
}

// jwsOpts varies what sign puts in the JWS.
type jwsOpts struct {
	url      string // default: the target
	nonce    *string
	embedJWK bool   // jwk instead of kid
	kid      string // overrides c.kid
	both     bool   // jwk and kid
	key      crypto.Signer
	alg      jose.SignatureAlgorithm
	extra    map[jose.HeaderKey]any
}

func (c *rawClient) sign(target string, payload []byte, o jwsOpts) []byte {
	c.t.Helper()
	key := c.key
	if o.key != nil {
		key = o.key
	}
	alg := o.alg
	if alg == "" {
		alg = jose.ES256
	}
	url := target
	if o.url != "" {
		url = o.url
	}
	nonce := ""
	if o.nonce != nil {
		nonce = *o.nonce
	} else {
		nonce = c.nonce()
	}
	so := &jose.SignerOptions{ExtraHeaders: map[jose.HeaderKey]any{"url": url}}
	if nonce != "" {
		so.ExtraHeaders["nonce"] = nonce
	}
	for k, v := range o.extra {
		so.ExtraHeaders[k] = v
	}
	kid := c.kid
	if o.kid != "" {
		kid = o.kid
	}
	if o.embedJWK || o.both {
		so.EmbedJWK = true
	}
	if !o.embedJWK && kid != "" {
		so.ExtraHeaders[jose.HeaderKey("kid")] = kid
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, so)
	if err != nil {
		c.t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		c.t.Fatal(err)
	}
	// go-jose leaves out an empty payload; RFC 7515 §7.2.1 (and real
	// clients) send "payload": "" for POST-as-GET.
	var m map[string]any
	json.Unmarshal([]byte(jws.FullSerialize()), &m)
	if _, ok := m["payload"]; !ok {
		m["payload"] = ""
	}
	out, _ := json.Marshal(m)
	return out
}

type rawResponse struct {
	status  int
	header  http.Header
	body    []byte
	problem *problem.Problem
}

func (c *rawClient) postRaw(target, contentType string, body []byte) rawResponse {
	c.t.Helper()
	resp, err := c.e.ts.Client().Post(target, contentType, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), problem.ContentType) {
		out.problem = &problem.Problem{}
		if err := json.Unmarshal(b, out.problem); err != nil {
			c.t.Fatalf("problem document does not parse: %v: %s", err, b)
		}
	}
	return out
}

func (c *rawClient) post(target string, payload any, o jwsOpts) rawResponse {
	c.t.Helper()
	var p []byte
	switch v := payload.(type) {
	case nil:
		p = nil
	case []byte:
		p = v
	default:
		p, _ = json.Marshal(v)
	}
	return c.postRaw(target, "application/jose+json", c.sign(target, p, o))
}

// register creates the client's account and remembers its kid.
func (c *rawClient) register() {
	c.t.Helper()
	r := c.post(c.e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
	if r.status != http.StatusCreated {
		c.t.Fatalf("new-account: %d %s", r.status, r.body)
	}
	c.kid = r.header.Get("Location")
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// handMade builds a flattened JWS from raw parts, for algorithms no signer
// library will produce.
func handMade(header map[string]any, payload string) []byte {
	return flatJWSOf(header, payload, b64([]byte("not-a-signature")))
}

// unsigned is handMade with an empty signature: an unsecured JWS (RFC
// 7515 Appendix A.5) when its alg is "none".
func unsigned(header map[string]any, payload string) []byte {
	return flatJWSOf(header, payload, "")
}

// flatJWSOf is the flattened JWS of header, payload and an encoded
// signature, as they are.
func flatJWSOf(header map[string]any, payload, signature string) []byte {
	h, _ := json.Marshal(header)
	body, _ := json.Marshal(map[string]string{"protected": b64(h), "payload": b64([]byte(payload)), "signature": signature})
	return body
}

// es256Signed is the flattened JWS of header and payload with an ES256
// signature (SHA-256, r and s each as long as k's curve's order) by k,
// whatever k's curve: a signature that verifies with an algorithm that
// does not fit the key.
func es256Signed(tb testing.TB, k *ecdsa.PrivateKey, header map[string]any, payload string) []byte {
	tb.Helper()
	h, _ := json.Marshal(header)
	sum := sha256.Sum256([]byte(b64(h) + "." + b64([]byte(payload))))
	r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
	if err != nil {
		tb.Fatal(err)
	}
	size := (k.Curve.Params().BitSize + 7) / 8
	sig := make([]byte, 2*size)
	r.FillBytes(sig[:size])
	s.FillBytes(sig[size:])
	return flatJWSOf(header, payload, b64(sig))
}

func strp(s string) *string { return &s }

func TestBadRequestsGetTheRightProblem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newTestEnv(t, func(c *ProfileConfig) {
		c.Challenges = []string{vocab.ChallengeHTTP01}
		c.Deny = &IdentifierPolicy{Domains: []string{"denied.example.com"}}
	})
	other := newTestEnv(t, func(c *ProfileConfig) { c.Profile = "other" })

	alice := e.rawClient()
	alice.register()
	bob := e.rawClient()
	bob.register()
	stranger := other.rawClient()
	stranger.register()
	deactivated := e.rawClient()
	deactivated.register()
	if r := deactivated.post(deactivated.kid, map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != 200 {
		t.Fatalf("deactivate: %d %s", r.status, r.body)
	}

	// An order of Alice's, made ready through the real validation path.
	// It has two names, so a CSR can lack one without naming another.
	ac := e.client(ctx)
	readyNames := []string{"ready.example.com", "www.ready.example.com"}
	ready, err := ac.AuthorizeOrder(ctx, acme.DomainIDs(readyNames...))
	if err != nil {
		t.Fatal(err)
	}
	ready = e.authorize(ctx, ac, ready)
	acKID := string(ac.KID)
	acKey := ac.Key
	aliceOrder := alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{{"type": "dns", "value": "p.example.com"}}}, jwsOpts{})
	if aliceOrder.status != http.StatusCreated {
		t.Fatalf("new-order: %d %s", aliceOrder.status, aliceOrder.body)
	}
	var aliceOrderJSON orderJSON
	json.Unmarshal(aliceOrder.body, &aliceOrderJSON)
	authzR := alice.post(aliceOrderJSON.Authorizations[0], nil, jwsOpts{})
	if authzR.status != 200 {
		t.Fatalf("authz: %d %s", authzR.status, authzR.body)
	}
	var authz authzJSON
	json.Unmarshal(authzR.body, &authz)
	aliceChallenge := authz.Challenges[0].URL

	used := alice.nonce()
	alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{{"type": "dns", "value": "q.example.com"}}}, jwsOpts{nonce: &used})
	certKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	orderKey := acKey.(*ecdsa.PrivateKey)
	finalizeAs := func(csr []byte) func() rawResponse {
		return func() rawResponse {
			rc := &rawClient{t: t, e: e, key: acKey, kid: acKID}
			return rc.post(ready.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
		}
	}
	newOrder := func(c *rawClient, ids ...map[string]string) func() rawResponse {
		return func() rawResponse { return c.post(e.url("/new-order"), map[string]any{"identifiers": ids}, jwsOpts{}) }
	}
	dns := func(v string) map[string]string { return map[string]string{"type": "dns", "value": v} }

	// A profile whose every limit is tight, each row's account brought
	// to the edge of the limit the row is about (see limits_test.go).
	limited := newTestEnv(t, func(c *ProfileConfig) {
		c.Challenges = []string{vocab.ChallengeHTTP01}
		c.Limits = &LimitsConfig{AccountsPerIP: rate(5, time.Hour), OrdersPerAccount: rate(2, time.Hour),
			PendingAuthorizations: limitCap(4), FailedValidations: rate(1, time.Hour), DuplicateCertificates: rate(1, time.Hour),
			MaxIdentifiers: limitCap(3)}
	})
	limitedClient := func(orders ...[]map[string]string) *rawClient {
		c := limited.rawClient()
		c.register()
		for _, ids := range orders {
			c.order(ids...)
		}
		return c
	}
	manyOrders := limitedClient([]map[string]string{dns("a.example.com")}, []map[string]string{dns("b.example.com")})
	manyPending := limitedClient([]map[string]string{dns("a.example.com"), dns("b.example.com"), dns("c.example.com")})
	duplicates := limitedClient() // with the set's one certificate
	if r := duplicates.finalize(duplicates.readyOrder("a.example.com", "b.example.com"),
		newCSR(t, certKey, "", []string{"a.example.com", "b.example.com"}, nil)); r.status != http.StatusOK {
		t.Fatalf("finalize: %d %s", r.status, r.body)
	}
	failing := limitedClient()
	failed := failing.order(dns("fails.example.com"))
	failing.answerHTTP01(failed.Authorizations[0], "a wrong answer")
	failing.await(failed.Authorizations[0], "invalid")
	limitedClient() // the fifth account of this address
	newLimitedOrder := func(c *rawClient, ids ...map[string]string) func() rawResponse {
		return func() rawResponse {
			return c.post(limited.url("/new-order"), map[string]any{"identifiers": ids}, jwsOpts{})
		}
	}

	tests := []struct {
		name       string
		do         func() rawResponse
		wantStatus int
		wantType   vocab.ProblemType
	}{
		{"fail/wrong content type", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/json", alice.sign(e.url("/new-order"), []byte(`{}`), jwsOpts{}))
		}, 415, vocab.ErrorMalformed},
		{"fail/unparsable JWS", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json", []byte(`{"protected":`))
		}, 400, vocab.ErrorMalformed},
		{"fail/compact serialization", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json", []byte(`eyJhbGciOiJFUzI1NiJ9.e30.c2ln`))
		}, 400, vocab.ErrorMalformed},
		{"fail/alg none", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json",
				handMade(map[string]any{"alg": "none", "kid": alice.kid, "nonce": alice.nonce(), "url": e.url("/new-order")}, `{}`))
		}, 400, vocab.ErrorBadSignatureAlgorithm},
		{"fail/unsecured JWS: alg none with an empty signature", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json",
				unsigned(map[string]any{"alg": "none", "kid": alice.kid, "nonce": alice.nonce(), "url": e.url("/new-order")}, `{}`))
		}, 400, vocab.ErrorBadSignatureAlgorithm},
		{"fail/an allowed alg with an empty signature", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json",
				unsigned(map[string]any{"alg": "ES256", "kid": alice.kid, "nonce": alice.nonce(), "url": e.url("/new-order")}, `{}`))
		}, 400, vocab.ErrorMalformed},
		{"fail/alg HS256", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json",
				handMade(map[string]any{"alg": "HS256", "kid": alice.kid, "nonce": alice.nonce(), "url": e.url("/new-order")}, `{}`))
		}, 400, vocab.ErrorBadSignatureAlgorithm},
		{"fail/alg that does not fit the key", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json",
				handMade(map[string]any{"alg": "ES384", "kid": alice.kid, "nonce": alice.nonce(), "url": e.url("/new-order")}, `{}`))
		}, 400, vocab.ErrorBadSignatureAlgorithm},
		{"fail/ES256 by a P-384 key, with a signature that verifies", func() rawResponse {
			// RFC 7518 §3.4: ES256 is ECDSA on P-256 with SHA-256. A P-384
			// key's valid signature over the SHA-256 digest is refused for
			// its algorithm, not accepted because it verifies.
			k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			hdr := map[string]any{"alg": "ES256", "jwk": jwkOf(t, k.Public()), "nonce": alice.nonce(), "url": e.url("/new-account")}
			return alice.postRaw(e.url("/new-account"), "application/jose+json", es256Signed(t, k, hdr, `{"termsOfServiceAgreed":true}`))
		}, 400, vocab.ErrorBadSignatureAlgorithm},
		{"fail/crit header", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{extra: map[jose.HeaderKey]any{"crit": []string{"exp"}, "exp": 1}})
		}, 400, vocab.ErrorMalformed},
		{"fail/unencoded payload option without crit", func() rawResponse {
			// Signed over the base64url payload, as if b64 were not there:
			// only the option itself is wrong.
			hdr := map[string]any{"alg": "ES256", "kid": alice.kid, "nonce": alice.nonce(), "url": e.url("/new-order"), "b64": false}
			body, _ := json.Marshal(flatJWS(t, alice.key, hdr, `{"identifiers":[{"type":"dns","value":"b64.example.com"}]}`))
			return alice.postRaw(e.url("/new-order"), "application/jose+json", body)
		}, 400, vocab.ErrorMalformed},
		{"fail/both jwk and kid", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{both: true})
		}, 400, vocab.ErrorMalformed},
		{"fail/an empty kid beside a jwk is both", func() rawResponse {
			return e.rawClient().post(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true},
				jwsOpts{embedJWK: true, extra: map[jose.HeaderKey]any{"kid": ""}})
		}, 400, vocab.ErrorMalformed},
		{"fail/a null jwk beside a kid is both", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dns("null-jwk.example.com")}},
				jwsOpts{extra: map[jose.HeaderKey]any{"jwk": nil}})
		}, 400, vocab.ErrorMalformed},
		{"fail/neither jwk nor kid", func() rawResponse {
			c := &rawClient{t: t, e: e, key: alice.key}
			return c.post(e.url("/new-order"), map[string]any{}, jwsOpts{})
		}, 400, vocab.ErrorMalformed},
		{"fail/unknown kid", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{kid: e.url("/account/nope")})
		}, 400, vocab.ErrorAccountDoesNotExist},
		{"fail/kid from another profile", func() rawResponse {
			return stranger.post(e.url("/new-order"), map[string]any{}, jwsOpts{nonce: strp(e.rawClient().nonce())})
		}, 400, vocab.ErrorAccountDoesNotExist},
		{"fail/signature by another key", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{key: bob.key})
		}, 400, vocab.ErrorMalformed},
		{"fail/url mismatch", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{url: e.url("/new-account")})
		}, 401, vocab.ErrorUnauthorized},
		{"fail/replayed nonce", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{nonce: &used})
		}, 400, vocab.ErrorBadNonce},
		{"fail/missing nonce", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{nonce: strp("")})
		}, 400, vocab.ErrorBadNonce},
		{"fail/made-up nonce", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{nonce: strp(b64(make([]byte, 32)))})
		}, 400, vocab.ErrorBadNonce},
		{"fail/other profile's nonce", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{nonce: strp(stranger.nonce())})
		}, 400, vocab.ErrorBadNonce},
		{"fail/expired nonce", func() rawResponse {
			old := e.srv.nonces.mint(e.srv.Profile(), time.Now().Add(-2*nonceLifetime))
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{nonce: &old})
		}, 400, vocab.ErrorBadNonce},
		{"fail/oversized body", func() rawResponse {
			return alice.postRaw(e.url("/new-order"), "application/jose+json", bytes.Repeat([]byte("x"), maxBodyBytes+10))
		}, 413, vocab.ErrorMalformed},
		{"fail/deactivated account", newOrder(deactivated, dns("x.example.com")), 401, vocab.ErrorUnauthorized},
		{"fail/jwk where an account is needed", func() rawResponse {
			return alice.post(e.url("/new-order"), map[string]any{}, jwsOpts{embedJWK: true})
		}, 400, vocab.ErrorMalformed},
		{"fail/kid on new-account", func() rawResponse {
			return alice.post(e.url("/new-account"), map[string]any{}, jwsOpts{})
		}, 400, vocab.ErrorMalformed},
		{"fail/onlyReturnExisting for an unknown key", func() rawResponse {
			return e.rawClient().post(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{embedJWK: true})
		}, 400, vocab.ErrorAccountDoesNotExist},
		{"fail/contact that is not mailto", func() rawResponse {
			return e.rawClient().post(e.url("/new-account"), map[string]any{"contact": []string{"tel:+123"}}, jwsOpts{embedJWK: true})
		}, 400, vocab.ErrorUnsupportedContact},
		{"fail/contact with two addresses", func() rawResponse {
			return e.rawClient().post(e.url("/new-account"), map[string]any{"contact": []string{"mailto:a@example.com,b@example.com"}}, jwsOpts{embedJWK: true})
		}, 400, vocab.ErrorInvalidContact},
		// Each CSR row has exactly one thing wrong, so it is refused
		// by that one check.
		{"fail/CSR with an extra name", finalizeAs(newCSR(t, certKey, "", []string{"ready.example.com", "www.ready.example.com", "extra.example.com"}, nil)), 400, vocab.ErrorBadCSR},
		{"fail/CSR with a missing name", finalizeAs(newCSR(t, certKey, "", []string{"ready.example.com"}, nil)), 400, vocab.ErrorBadCSR},
		{"fail/CSR common name not in the order", finalizeAs(newCSR(t, certKey, "cn.example.com", readyNames, nil)), 400, vocab.ErrorBadCSR},
		{"fail/CSR signed with the account key", finalizeAs(newCSR(t, orderKey, "", readyNames, nil)), 400, vocab.ErrorBadCSR},
		{"fail/CSR that is not DER", finalizeAs([]byte("garbage")), 400, vocab.ErrorBadCSR},
		{"fail/denied name", newOrder(alice, dns("denied.example.com")), 400, vocab.ErrorRejectedIdentifier},
		{"fail/wildcard without dns-01", newOrder(alice, dns("*.example.com")), 400, vocab.ErrorRejectedIdentifier},
		{"fail/malformed identifier", newOrder(alice, dns("bad..example.com")), 400, vocab.ErrorRejectedIdentifier},
		{"fail/IP with a zone", newOrder(alice, map[string]string{"type": "ip", "value": "fe80::1%eth0"}), 400, vocab.ErrorMalformed},
		{"fail/IP that validation never connects to", newOrder(alice, map[string]string{"type": "ip", "value": "169.254.169.254"}), 400, vocab.ErrorRejectedIdentifier},
		{"fail/unsupported identifier type", newOrder(alice, map[string]string{"type": "email", "value": "a@example.com"}), 400, vocab.ErrorUnsupportedIdentifier},
		{"fail/no identifiers", newOrder(alice), 400, vocab.ErrorMalformed},
		{"fail/finalize of an order that is not ready", func() rawResponse {
			return alice.post(aliceOrderJSON.Finalize, map[string]string{"csr": b64(newCSR(t, certKey, "", []string{"p.example.com"}, nil))}, jwsOpts{})
		}, 403, vocab.ErrorOrderNotReady},
		{"fail/challenge of another account's authorization", func() rawResponse {
			return bob.post(aliceChallenge, map[string]any{}, jwsOpts{})
		}, 403, vocab.ErrorUnauthorized},
		{"fail/order of another account", func() rawResponse {
			return bob.post(aliceOrderJSON.Finalize[:strings.LastIndex(aliceOrderJSON.Finalize, "/")], nil, jwsOpts{})
		}, 403, vocab.ErrorUnauthorized},
		{"fail/account of another account", func() rawResponse {
			return bob.post(alice.kid, nil, jwsOpts{})
		}, 403, vocab.ErrorUnauthorized},
		{"fail/unknown resource", func() rawResponse {
			return alice.post(e.url("/order/nope"), nil, jwsOpts{})
		}, 404, vocab.ErrorMalformed},
		{"fail/over accounts_per_ip", func() rawResponse {
			return limited.rawClient().post(limited.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
		}, 429, vocab.ErrorRateLimited},
		{"fail/over orders_per_account", newLimitedOrder(manyOrders, dns("c.example.com")), 429, vocab.ErrorRateLimited},
		{"fail/over pending_authorizations", newLimitedOrder(manyPending, dns("d.example.com"), dns("e.example.com")), 429, vocab.ErrorRateLimited},
		{"fail/over failed_validations", newLimitedOrder(failing, dns("fails.example.com")), 429, vocab.ErrorRateLimited},
		{"fail/over duplicate_certificates", newLimitedOrder(duplicates, dns("b.example.com"), dns("a.example.com")), 429, vocab.ErrorRateLimited},
		{"fail/over max_identifiers", newLimitedOrder(failing, dns("a.example.com"), dns("b.example.com"), dns("c.example.com"), dns("d.example.com")),
			400, vocab.ErrorRejectedIdentifier},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.do()
			if r.status != tc.wantStatus || r.problem == nil || r.problem.Type != tc.wantType {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tc.wantStatus, tc.wantType)
			}
			if r.problem.Detail == "" {
				t.Errorf("problem has no detail")
			}
			if limit, ok := strings.CutPrefix(tc.name, "fail/over "); ok && !strings.HasPrefix(r.problem.Detail, limit+": ") {
				t.Errorf("detail %q does not name the limit %s", r.problem.Detail, limit)
			}
			if ra := r.header.Get("Retry-After"); (r.status == http.StatusTooManyRequests) != (ra != "") {
				t.Errorf("status %d with Retry-After %q: a 429 has one, nothing else here does", r.status, ra)
			}
			if r.header.Get("Replay-Nonce") == "" {
				t.Errorf("error response has no Replay-Nonce")
			}
			if !strings.Contains(r.header.Get("Link"), `rel="index"`) {
				t.Errorf("error response has no Link rel=index: %q", r.header.Get("Link"))
			}
		})
	}
	// The CSR rows were refused for what is wrong with each: the order
	// takes a CSR naming exactly its names.
	t.Run("ok/CSR naming exactly the order's names", func(t *testing.T) {
		if r := finalizeAs(newCSR(t, certKey, "", readyNames, nil))(); r.status != http.StatusOK {
			t.Fatalf("got %d %s, want 200", r.status, r.body)
		}
	})
	_ = ctx
}
