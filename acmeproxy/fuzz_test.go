package acmeproxy

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"

	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The fuzz targets run against a server whose every secret and key is
// fixed, so that the seed corpus under testdata/fuzz stays valid: the
// nonces in it were minted with fuzzNonceKey at fuzzStart, and its JWSs
// are signed by the keys fuzzKeys derives. Regenerate the corpus with
//
//	ACMEPROXY_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeedCorpus ./acmeproxy/
const (
	fuzzProfile = "fuzz"
	fuzzBase    = "https://acme.test/acme/fuzz"
)

var (
	fuzzStart    = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	fuzzNonceKey = bytes.Repeat([]byte{0x5a}, 32)
)

// fuzzMode is what one fuzz input is verified as: the route's key mode,
// the URL it reached, and whether it is an outer JWS (with a nonce) or
// the inner JWS of a key change (without).
type fuzzMode struct {
	name     string
	mode     keyMode
	url      string
	useNonce bool
}

var fuzzModes = [...]fuzzMode{
	{"new-account (jwk)", needJWK, fuzzBase + "/new-account", true},
	{"new-order (kid)", needKID, fuzzBase + "/new-order", true},
	{"revoke-cert (kid or jwk)", kidOrJWK, fuzzBase + "/revoke-cert", true},
	{"key-change inner JWS (jwk, no nonce)", needJWK, fuzzBase + "/key-change", false},
}

const (
	modeNewAccount uint8 = iota
	modeNewOrder
	modeRevoke
	modeInner
)

// fuzzKeySet is the test's own keys, derived from fixed seeds.
type fuzzKeySet struct {
	p256 *ecdsa.PrivateKey // a valid account
	p384 *ecdsa.PrivateKey // a deactivated account
	ed   ed25519.PrivateKey
}

func fuzzKeys(tb testing.TB) fuzzKeySet {
	tb.Helper()
	d256 := sha256.Sum256([]byte("acmeproxy fuzz P-256 key"))
	p256, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d256[:])
	if err != nil {
		tb.Fatal(err)
	}
	d384 := sha512.Sum384([]byte("acmeproxy fuzz P-384 key"))
	p384, err := ecdsa.ParseRawPrivateKey(elliptic.P384(), d384[:])
	if err != nil {
		tb.Fatal(err)
	}
	seed := sha256.Sum256([]byte("acmeproxy fuzz Ed25519 key"))
	return fuzzKeySet{p256: p256, p384: p384, ed: ed25519.NewKeyFromSeed(seed[:])}
}

func (k fuzzKeySet) all() []crypto.Signer { return []crypto.Signer{k.p256, k.p384, k.ed} }

// refusingValidator stands in where no challenge is ever validated.
type refusingValidator struct{}

var errNoValidation = errors.New("no validation while fuzzing")

func (refusingValidator) HTTP01(context.Context, string, string, string, string) error {
	return errNoValidation
}
func (refusingValidator) DNS01(context.Context, string, string) error { return errNoValidation }
func (refusingValidator) TLSALPN01(context.Context, string, string, string) error {
	return errNoValidation
}

// fuzzFixture is a profile server over a real SQLite store, with fixed
// keys, a fixed nonce key and a clock that does not move.
type fuzzFixture struct {
	srv    *Server
	db     *store.DB
	keys   fuzzKeySet
	owned  map[string]bool // thumbprints of the test's keys
	kidP   string          // kid of the P-256 account (valid)
	kidEd  string          // kid of the Ed25519 account (valid)
	kid384 string          // kid of the P-384 account (deactivated)
}

func newFuzzFixture(tb testing.TB) *fuzzFixture {
	tb.Helper()
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(tb.TempDir(), "fuzz.db"), store.SQLiteOptions{Synchronous: "NORMAL"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	// The server and its CA share the fake clock: a leaf's validity and
	// the authority's idea of now (an expired certificate is not revoked)
	// must agree.
	clk := clocktest.New(fuzzStart)
	_, src := newTestCAAt(tb, fuzzStart)
	sgn, err := localca.New(src, localca.Options{Lifetime: time.Hour, Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := NewServer(ctx, ProfileConfig{Profile: fuzzProfile}, Options{
		DB: db, Queue: jobs.NewQueue(db, nil), Signer: sgn, Validator: refusingValidator{},
		Clock: clk,
	})
	if err != nil {
		tb.Fatal(err)
	}
	srv.nonces.key = fuzzNonceKey
	fx := &fuzzFixture{srv: srv, db: db, keys: fuzzKeys(tb), owned: map[string]bool{}}
	for _, k := range fx.keys.all() {
		fx.owned[fuzzThumbprint(tb, k.Public())] = true
	}
	register := func(k crypto.Signer) string {
		jwk, err := (&jose.JSONWebKey{Key: k.Public()}).MarshalJSON()
		if err != nil {
			tb.Fatal(err)
		}
		a, _, err := db.CreateAccount(ctx, store.Account{Profile: fuzzProfile, Thumbprint: fuzzThumbprint(tb, k.Public()), KeyJWK: jwk}, fuzzStart)
		if err != nil {
			tb.Fatal(err)
		}
		return fuzzBase + "/account/" + a.ID
	}
	fx.kidP, fx.kidEd, fx.kid384 = register(fx.keys.p256), register(fx.keys.ed), register(fx.keys.p384)
	if _, err := db.DeactivateAccount(ctx, strings.TrimPrefix(fx.kid384, fuzzBase+"/account/"), fuzzStart); err != nil {
		tb.Fatal(err)
	}
	return fx
}

func fuzzThumbprint(tb testing.TB, pub crypto.PublicKey) string {
	tb.Helper()
	tp, err := thumbprint(&jose.JSONWebKey{Key: pub})
	if err != nil {
		tb.Fatal(err)
	}
	return tp
}

// nonce mints a nonce the fixture's server accepts (until used).
func (fx *fuzzFixture) nonce() string { return fx.srv.nonces.mint(fuzzProfile, fuzzStart) }

// ---- a hand-made JWS signer, for headers no library would produce ----

// algOf is the JWS algorithm of a key.
func algOf(k crypto.Signer) string {
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve == elliptic.P384() {
			return "ES384"
		}
		return "ES256"
	case ed25519.PrivateKey:
		return "EdDSA"
	case *rsa.PrivateKey:
		return "RS256"
	}
	return "none"
}

// jwsSign signs signingInput as alg requires (RFC 7518 §3).
func jwsSign(tb testing.TB, k crypto.Signer, signingInput string) []byte {
	tb.Helper()
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		size, h := 32, crypto.SHA256
		if k.Curve == elliptic.P384() {
			size, h = 48, crypto.SHA384
		}
		hh := h.New()
		hh.Write([]byte(signingInput))
		r, s, err := ecdsa.Sign(rand.Reader, k, hh.Sum(nil))
		if err != nil {
			tb.Fatal(err)
		}
		out := make([]byte, 2*size)
		r.FillBytes(out[:size])
		s.FillBytes(out[size:])
		return out
	case ed25519.PrivateKey:
		return ed25519.Sign(k, []byte(signingInput))
	case *rsa.PrivateKey:
		sum := sha256.Sum256([]byte(signingInput))
		sig, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
		if err != nil {
			tb.Fatal(err)
		}
		return sig
	}
	tb.Fatalf("cannot sign with %T", k)
	return nil
}

func jwkOf(tb testing.TB, pub crypto.PublicKey) json.RawMessage {
	tb.Helper()
	b, err := (&jose.JSONWebKey{Key: pub}).MarshalJSON()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// flatJWS returns the members of a flattened JWS whose protected header is
// hdr, signed by k (nil: the signature is junk).
func flatJWS(tb testing.TB, k crypto.Signer, hdr map[string]any, payload string) map[string]any {
	tb.Helper()
	h, err := json.Marshal(hdr)
	if err != nil {
		tb.Fatal(err)
	}
	prot, pl := b64(h), b64([]byte(payload))
	sig := []byte("junk-signature")
	if k != nil {
		sig = jwsSign(tb, k, prot+"."+pl)
	}
	return map[string]any{"protected": prot, "payload": pl, "signature": b64(sig)}
}

// appendMember adds a member at the end of a JSON object: last, where a
// decoder that keeps the last of duplicate names reads it.
func appendMember(tb testing.TB, obj []byte, name string, value any) []byte {
	tb.Helper()
	out := bytes.TrimSuffix(bytes.TrimSpace(obj), []byte("}"))
	out = append(out, ',')
	out = append(out, marshal(tb, name)...)
	out = append(out, ':')
	out = append(out, marshal(tb, value)...)
	return append(out, '}')
}

func marshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// ---- FuzzVerifyJWS ----

type fuzzSeed struct {
	name string
	body []byte
	mode uint8
}

// fileSeeds are the seeds stored under testdata/fuzz/FuzzVerifyJWS: they
// depend only on the fixed keys and nonce key, not on a store's ids.
func fileSeeds(tb testing.TB, fx *fuzzFixture) []fuzzSeed {
	k := fx.keys
	newAcct := fuzzModes[modeNewAccount].url
	jwkHdr := func(key crypto.Signer, extra map[string]any) map[string]any {
		h := map[string]any{"alg": algOf(key), "jwk": jwkOf(tb, key.Public()), "nonce": fx.nonce(), "url": newAcct}
		for n, v := range extra {
			if v == nil {
				delete(h, n)
			} else {
				h[n] = v
			}
		}
		return h
	}
	seed := func(name string, mode uint8, members map[string]any) fuzzSeed {
		return fuzzSeed{name, marshal(tb, members), mode}
	}
	acct := `{"termsOfServiceAgreed":true,"contact":["mailto:fuzz@example.com"]}`
	unknownKID := fuzzBase + "/account/no-such-account"

	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		tb.Fatal(err)
	}
	bigHdr := jwkHdr(k.p256, map[string]any{"x-padding": strings.Repeat("p", 40<<10)})
	huge := jwkHdr(k.p256, map[string]any{"x-padding": strings.Repeat("p", maxBodyBytes)})
	general := flatJWS(tb, k.p256, jwkHdr(k.p256, nil), acct)
	withHeader := flatJWS(tb, k.p256, jwkHdr(k.p256, nil), acct)
	withHeader["header"] = map[string]any{"kid": unknownKID}
	noPayload := flatJWS(tb, k.p256, jwkHdr(k.p256, nil), acct)
	delete(noPayload, "payload")
	badB64 := flatJWS(tb, k.p256, jwkHdr(k.p256, nil), acct)
	badB64["protected"] = "eyJhbGciOi$$$not base64url***"
	privJWK, err := (&jose.JSONWebKey{Key: k.p256}).MarshalJSON()
	if err != nil {
		tb.Fatal(err)
	}
	// The inner JWS of a key change: jwk of the new key, no nonce, the
	// outer url (RFC 8555 §7.3.5).
	innerHdr := func(key crypto.Signer) map[string]any {
		return map[string]any{"alg": algOf(key), "jwk": jwkOf(tb, key.Public()), "url": fuzzModes[modeInner].url}
	}
	innerPayload := string(marshal(tb, map[string]any{"account": fx.kidP, "oldKey": jwkOf(tb, k.p256.Public())}))
	innerWithNonce := innerHdr(k.ed)
	innerWithNonce["nonce"] = fx.nonce()

	// A captured, validly signed request whose signed url points
	// elsewhere, with a second, differently-cased "Protected" member
	// carrying a fresh nonce and this URL (see
	// TestASecondProtectedMemberCannotReplaceTheSignedHeader).
	smuggled := appendMember(tb, marshal(tb, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"url": fuzzBase + "/elsewhere"}), acct)),
		"Protected", b64(marshal(tb, jwkHdr(k.p256, nil))))
	// "URL" is not the "url" header parameter (RFC 7515 §4: names are
	// case-sensitive).
	upperURL := jwkHdr(k.p256, map[string]any{"url": nil, "URL": newAcct})

	// An Ed25519 "key" that is the identity point verifies every
	// signature whose R is the identity and s is zero.
	identity := make([]byte, 32)
	identity[0] = 1
	weakSig := make([]byte, 64)
	weakSig[0] = 1
	weakJWK := json.RawMessage(`{"kty":"OKP","crv":"Ed25519","x":"` + b64(identity) + `"}`)
	weak := flatJWS(tb, nil, map[string]any{"alg": "EdDSA", "jwk": weakJWK, "nonce": fx.nonce(), "url": newAcct}, acct)
	weak["signature"] = b64(weakSig)

	return []fuzzSeed{
		seed("ok-new-account-es256", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, nil), acct)),
		seed("ok-new-account-es384", modeNewAccount, flatJWS(tb, k.p384, jwkHdr(k.p384, nil), acct)),
		seed("ok-new-account-eddsa", modeNewAccount, flatJWS(tb, k.ed, jwkHdr(k.ed, nil), acct)),
		seed("ok-revoke-by-certificate-key", modeRevoke, flatJWS(tb, k.ed, jwkHdr(k.ed, map[string]any{"url": fuzzModes[modeRevoke].url}), `{"certificate":"MIIB"}`)),
		seed("ok-key-change-inner", modeInner, flatJWS(tb, k.ed, innerHdr(k.ed), innerPayload)),
		seed("ok-new-account-large-header", modeNewAccount, flatJWS(tb, k.p256, bigHdr, acct)),
		seed("fail-huge-header", modeNewAccount, flatJWS(tb, k.p256, huge, acct)),
		seed("fail-unknown-kid", modeNewOrder, flatJWS(tb, k.p256, map[string]any{"alg": "ES256", "kid": unknownKID, "nonce": fx.nonce(), "url": fuzzModes[modeNewOrder].url}, `{"identifiers":[{"type":"dns","value":"a.example.com"}]}`)),
		seed("fail-alg-none", modeNewAccount, flatJWS(tb, nil, jwkHdr(k.p256, map[string]any{"alg": "none"}), acct)),
		seed("fail-alg-hs256", modeNewAccount, flatJWS(tb, nil, jwkHdr(k.p256, map[string]any{"alg": "HS256"}), acct)),
		seed("fail-alg-es256-with-p384-key", modeNewAccount, flatJWS(tb, k.p384, jwkHdr(k.p384, map[string]any{"alg": "ES256"}), acct)),
		seed("fail-crit", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"crit": []string{"exp"}, "exp": 1}), acct)),
		seed("fail-jwk-and-kid", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"kid": unknownKID}), acct)),
		seed("fail-missing-url", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"url": nil}), acct)),
		seed("fail-url-mismatch", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"url": fuzzModes[modeNewOrder].url}), acct)),
		seed("fail-missing-nonce", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"nonce": nil}), acct)),
		seed("fail-foreign-nonce", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"nonce": b64(make([]byte, nonceLen))}), acct)),
		seed("fail-bad-signature", modeNewAccount, flatJWS(tb, nil, jwkHdr(k.p256, nil), acct)),
		seed("fail-private-jwk", modeNewAccount, flatJWS(tb, k.p256, jwkHdr(k.p256, map[string]any{"jwk": json.RawMessage(privJWK)}), acct)),
		seed("fail-rsa-1024", modeNewAccount, flatJWS(tb, rsa1024, jwkHdr(rsa1024, nil), acct)),
		seed("fail-bad-base64", modeNewAccount, badB64),
		seed("fail-no-payload", modeNewAccount, noPayload),
		seed("fail-unprotected-header", modeNewAccount, withHeader),
		seed("fail-general-serialization", modeNewAccount, map[string]any{"payload": general["payload"],
			"signatures": []map[string]any{{"protected": general["protected"], "signature": general["signature"]}}}),
		seed("fail-inner-with-nonce", modeInner, flatJWS(tb, k.ed, innerWithNonce, innerPayload)),
		{"fail-smuggled-protected-member", smuggled, modeNewAccount},
		seed("fail-url-spelled-in-capitals", modeNewAccount, flatJWS(tb, k.p256, upperURL, acct)),
		seed("fail-ed25519-identity-key", modeNewAccount, weak),
		{"fail-compact-serialization", []byte("eyJhbGciOiJFUzI1NiJ9.eyJ9.c2ln"), modeNewAccount},
		{"fail-empty", nil, modeNewOrder},
		{"fail-json-array", []byte(`[{"protected":"e30"}]`), modeNewOrder},
	}
}

// runtimeSeeds depend on the account ids of this run's store; f.Add runs
// them in every go test too.
func runtimeSeeds(tb testing.TB, fx *fuzzFixture) []fuzzSeed {
	k := fx.keys
	order := `{"identifiers":[{"type":"dns","value":"a.example.com"}]}`
	kidHdr := func(kid string, key crypto.Signer, m uint8) map[string]any {
		return map[string]any{"alg": algOf(key), "kid": kid, "nonce": fx.nonce(), "url": fuzzModes[m].url}
	}
	return []fuzzSeed{
		{"ok-new-order-kid-es256", marshal(tb, flatJWS(tb, k.p256, kidHdr(fx.kidP, k.p256, modeNewOrder), order)), modeNewOrder},
		{"ok-post-as-get-kid-eddsa", marshal(tb, flatJWS(tb, k.ed, kidHdr(fx.kidEd, k.ed, modeNewOrder), "")), modeNewOrder},
		{"ok-revoke-kid", marshal(tb, flatJWS(tb, k.p256, kidHdr(fx.kidP, k.p256, modeRevoke), `{"certificate":"MIIB"}`)), modeRevoke},
		{"fail-revoke-deactivated-kid", marshal(tb, flatJWS(tb, k.p384, kidHdr(fx.kid384, k.p384, modeRevoke), `{"certificate":"MIIB"}`)), modeRevoke},
		{"fail-deactivated-kid", marshal(tb, flatJWS(tb, k.p384, kidHdr(fx.kid384, k.p384, modeNewOrder), order)), modeNewOrder},
		{"fail-kid-signed-by-other-key", marshal(tb, flatJWS(tb, k.ed, kidHdr(fx.kidP, k.ed, modeNewOrder), order)), modeNewOrder},
		{"fail-kid-on-new-account", marshal(tb, flatJWS(tb, k.p256, kidHdr(fx.kidP, k.p256, modeNewAccount), order)), modeNewAccount},
		{"fail-jwk-on-new-order", marshal(tb, flatJWS(tb, k.p256, map[string]any{"alg": "ES256", "jwk": jwkOf(tb, k.p256.Public()), "nonce": fx.nonce(), "url": fuzzModes[modeNewOrder].url}, order)), modeNewOrder},
	}
}

// FuzzVerifyJWS feeds arbitrary bodies to the one verification step
// every signed request passes (RFC 8555 §6.2–§6.5). It must never panic
// or fault, and whatever it accepts must be signed by one of the test's
// keys, over the url this request reached and the nonce it consumed.
func FuzzVerifyJWS(f *testing.F) {
	fx := newFuzzFixture(f)
	for _, s := range runtimeSeeds(f, fx) {
		f.Add(s.body, s.mode)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		m := fuzzModes[int(mode)%len(fuzzModes)]
		// Every input starts with no nonce used, so seeds stay valid
		// however often they run.
		defer func() {
			if _, err := fx.db.PruneNonces(ctx, fuzzStart.Add(100*nonceLifetime)); err != nil {
				t.Fatal(err)
			}
		}()
		var (
			req *signedRequest
			err error
		)
		if m.useNonce {
			r := httptest.NewRequest("POST", m.url, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/jose+json")
			req, err = fx.srv.verify(ctx, r, m.mode)
		} else {
			req, err = fx.srv.verifyJWS(ctx, body, fuzzBase, m.url, m.mode, false)
		}
		if err != nil {
			// A client's bytes earn a problem document, never a 500.
			if _, ok := problem.As(err); !ok {
				t.Fatalf("%s: a client's input caused a server fault: %v", m.name, err)
			}
			return
		}
		checkAccepted(t, fx, m, body, req)
	})
}

// checkAccepted is the oracle for an accepted request: an independent
// parse of the body must find a signature by the key the server used, a
// key the test owns, and signed headers that say what the server acted
// on.
func checkAccepted(t *testing.T, fx *fuzzFixture, m fuzzMode, body []byte, req *signedRequest) {
	t.Helper()
	var key *jose.JSONWebKey
	switch {
	case req.account != nil && req.jwk != nil:
		t.Fatalf("%s: accepted with both an account and a jwk", m.name)
	case req.account != nil:
		if m.mode == needJWK {
			t.Fatalf("%s: accepted a kid where a jwk is required", m.name)
		}
		if req.account.Status != "valid" {
			t.Fatalf("%s: accepted the key of a %s account (RFC 8555 §7.3.6)", m.name, req.account.Status)
		}
		var err error
		if key, err = parsePublicJWK(req.account.KeyJWK); err != nil {
			t.Fatal(err)
		}
	case req.jwk != nil:
		if m.mode == needKID {
			t.Fatalf("%s: accepted a jwk where an account is required", m.name)
		}
		key = req.jwk
	default:
		t.Fatalf("%s: accepted with neither an account nor a jwk", m.name)
	}
	tp, err := thumbprint(key)
	if err != nil {
		t.Fatal(err)
	}
	if !fx.owned[tp] {
		t.Fatalf("%s: accepted a JWS by a key the test does not own (%s)", m.name, tp)
	}
	if tp != req.thumbprint {
		t.Fatalf("%s: request thumbprint %s, key thumbprint %s", m.name, req.thumbprint, tp)
	}

	jws, err := jose.ParseSignedJSON(string(body), []jose.SignatureAlgorithm{jose.ES256, jose.ES384, jose.RS256, jose.EdDSA})
	if err != nil {
		t.Fatalf("%s: accepted a body that go-jose does not parse: %v", m.name, err)
	}
	payload, err := jws.Verify(key)
	if err != nil {
		t.Fatalf("%s: accepted a JWS whose signature does not verify with the key used: %v", m.name, err)
	}
	if !bytes.Equal(payload, req.payload) {
		t.Fatalf("%s: request payload %q is not the signed payload %q", m.name, req.payload, payload)
	}
	if len(jws.Signatures) != 1 {
		t.Fatalf("%s: accepted %d signatures", m.name, len(jws.Signatures))
	}
	signed := jws.Signatures[0].Protected
	// RFC 8555 §6.2: "jwk" or "kid" in the protected header names the key.
	if req.account != nil && signed.KeyID != fuzzBase+"/account/"+req.account.ID {
		t.Fatalf("%s: the signed kid %q is not the account %s the server used", m.name, signed.KeyID, req.account.ID)
	}
	if req.jwk != nil {
		if signed.JSONWebKey == nil {
			t.Fatalf("%s: the signed header has no jwk", m.name)
		}
		if stp, err := thumbprint(signed.JSONWebKey); err != nil || stp != tp {
			t.Fatalf("%s: the signed jwk is not the key the server used", m.name)
		}
	}
	if !slices.Contains(allowedAlgs, signed.Algorithm) {
		t.Fatalf("%s: accepted alg %q", m.name, signed.Algorithm)
	}
	// RFC 8555 §6.4: the signed url is the URL reached.
	if u, _ := signed.ExtraHeaders["url"].(string); u != m.url {
		t.Fatalf("%s: accepted a JWS whose signed url is %q, not %q", m.name, u, m.url)
	}
	// RFC 8555 §6.5: the signed nonce is the one consumed.
	if !m.useNonce {
		if signed.Nonce != "" {
			t.Fatalf("%s: accepted an inner JWS with a nonce", m.name)
		}
		return
	}
	if signed.Nonce == "" {
		t.Fatalf("%s: accepted a JWS with no signed nonce", m.name)
	}
	fresh, err := fx.db.UseNonce(context.Background(), signed.Nonce, fuzzStart.Add(nonceLifetime))
	if err != nil {
		t.Fatal(err)
	}
	if fresh {
		t.Fatalf("%s: accepted a JWS without consuming its signed nonce", m.name)
	}
}

// ---- FuzzCheckCSR ----

// fuzzOrder is the order every fuzzed CSR is checked against.
var fuzzOrder = []acme.Identifier{dnsIdent("a.example.com"), dnsIdent("b.example.com"), ipIdent("192.0.2.1")}

// cannedSigner signs with a fixed signature: for keys whose every
// signature is "valid".
type cannedSigner struct {
	pub crypto.PublicKey
	sig []byte
}

func (c cannedSigner) Public() crypto.PublicKey { return c.pub }
func (c cannedSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return c.sig, nil
}

// identityEd25519 is an Ed25519 public key at the identity point, and a
// signature (R = identity, s = 0) that verifies for it over any message.
func identityEd25519() cannedSigner {
	pub := make([]byte, ed25519.PublicKeySize)
	pub[0] = 1
	sig := make([]byte, ed25519.SignatureSize)
	sig[0] = 1
	return cannedSigner{pub: ed25519.PublicKey(pub), sig: sig}
}

func csrSeeds(tb testing.TB, keys fuzzKeySet) []fuzzSeed {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	names, ips := []string{"a.example.com", "b.example.com"}, []net.IP{net.ParseIP("192.0.2.1")}
	csr := func(name string, key crypto.Signer, tmpl x509.CertificateRequest) fuzzSeed {
		der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, key)
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		return fuzzSeed{name: name, body: der}
	}
	full := x509.CertificateRequest{DNSNames: names, IPAddresses: ips}
	withCN := full
	withCN.Subject = pkix.Name{CommonName: "A.Example.COM"}
	badSig := csr("fail-bad-signature", p256, full)
	badSig.body = bytes.Clone(badSig.body)
	badSig.body[len(badSig.body)-3] ^= 0xff
	email := full
	email.EmailAddresses = []string{"a@example.com"}
	uri := full
	uri.URIs = []*url.URL{{Scheme: "https", Host: "a.example.com"}}
	return []fuzzSeed{
		csr("ok-p256", p256, full),
		csr("ok-rsa2048", rsa2048, full),
		csr("ok-ed25519", ed, full),
		csr("ok-common-name-in-order", p256, withCN),
		csr("ok-upper-case-names", p256, x509.CertificateRequest{DNSNames: []string{"A.EXAMPLE.COM", "b.example.com"}, IPAddresses: ips}),
		csr("ok-ipv4-mapped-address", p256, x509.CertificateRequest{DNSNames: names, IPAddresses: []net.IP{net.ParseIP("::ffff:192.0.2.1")}}),
		csr("fail-ip-address-as-dns-name", p256, x509.CertificateRequest{DNSNames: append(names, "192.0.2.1")}),
		csr("fail-extra-name", p256, x509.CertificateRequest{DNSNames: append(names, "c.example.com"), IPAddresses: ips}),
		csr("fail-missing-name", p256, x509.CertificateRequest{DNSNames: names[:1], IPAddresses: ips}),
		csr("fail-common-name-not-in-order", p256, x509.CertificateRequest{Subject: pkix.Name{CommonName: "c.example.com"}, DNSNames: names, IPAddresses: ips}),
		csr("fail-account-key", keys.p256, full),
		csr("fail-email-address", p256, email),
		csr("fail-uri", p256, uri),
		csr("fail-p521", p521, full),
		csr("fail-rsa1024", rsa1024, full),
		csr("fail-ed25519-identity-key", identityEd25519(), full),
		badSig,
		{name: "fail-truncated", body: csr("t", p256, full).body[:40]},
		{name: "fail-garbage", body: []byte("not a CSR at all")},
	}
}

// FuzzCheckCSR feeds arbitrary DER to the CSR parser and checkCSR
// (RFC 8555 §7.4): never a panic, never a fault, and an accepted CSR is
// signed, carries an acceptable key other than the account's, and names
// exactly the order's identifiers.
func FuzzCheckCSR(f *testing.F) {
	keys := fuzzKeys(f)
	accountJWK := jwkOf(f, keys.p256.Public())
	accountSPKI, err := x509.MarshalPKIXPublicKey(keys.p256.Public())
	if err != nil {
		f.Fatal(err)
	}
	d := sha256.Sum256([]byte("acmeproxy fuzz certificate key"))
	certKey, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, der []byte) {
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			return
		}
		checkCSROracle(t, csr, accountJWK, accountSPKI)
		// A mutated CSR's signature no longer verifies, so the names
		// the fuzzer finds are refused before they are compared: the
		// same names again, signed by a key the order may have.
		again, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject:  pkix.Name{CommonName: csr.Subject.CommonName},
			DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses, EmailAddresses: csr.EmailAddresses, URIs: csr.URIs,
		}, certKey)
		if err != nil {
			return // names Go does not encode
		}
		if csr, err = x509.ParseCertificateRequest(again); err != nil {
			return
		}
		checkCSROracle(t, csr, accountJWK, accountSPKI)
	})
}

// checkCSROracle fails t unless checkCSR refuses csr with a badCSR
// problem or csr is signed, carries an acceptable key other than the
// account's, and names exactly fuzzOrder's identifiers.
func checkCSROracle(t *testing.T, csr *x509.CertificateRequest, accountJWK json.RawMessage, accountSPKI []byte) {
	t.Helper()
	if err := authority.CheckCSR(csr, fuzzOrder, accountJWK); err != nil {
		if p, ok := problem.As(err); !ok || p.Type != acme.ErrorBadCSR {
			t.Fatalf("checkCSR refused with %v, want a badCSR problem", err)
		}
		return
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatalf("accepted a CSR whose signature does not verify: %v", err)
	}
	switch k := csr.PublicKey.(type) {
	case *rsa.PublicKey:
		if b := k.N.BitLen(); b < 2048 || b > 8192 {
			t.Fatalf("accepted a %d-bit RSA key", b)
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			t.Fatalf("accepted an ECDSA key on %s", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		// go-jose keeps a list of the low-order encodings Go's
		// verifier accepts; such a key verifies forged signatures.
		if _, err := (&jose.JSONWebKey{Key: k}).Thumbprint(crypto.SHA256); err != nil {
			t.Fatalf("accepted a weak Ed25519 key: %v", err)
		}
	default:
		t.Fatalf("accepted a %T key", k)
	}
	if spki, err := x509.MarshalPKIXPublicKey(csr.PublicKey); err == nil && bytes.Equal(spki, accountSPKI) {
		t.Fatalf("accepted the account key as the certificate key")
	}
	if len(csr.EmailAddresses)+len(csr.URIs) > 0 {
		t.Fatalf("accepted a CSR with e-mail or URI names")
	}
	// Names with their types: an IP address in a dNSName is a DNS name.
	got := map[string]bool{}
	for _, n := range csr.DNSNames {
		got["dns:"+strings.ToLower(n)] = true
	}
	for _, ip := range csr.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			t.Fatalf("accepted an IP SAN of %d bytes", len(ip))
		}
		got["ip:"+a.Unmap().String()] = true
	}
	if cn := csr.Subject.CommonName; cn != "" {
		if a, err := netip.ParseAddr(cn); err == nil {
			got["ip:"+a.Unmap().String()] = true
		} else {
			got["dns:"+strings.ToLower(cn)] = true
		}
	}
	want := map[string]bool{}
	for _, id := range fuzzOrder {
		want[id.Type+":"+id.Value] = true
	}
	if fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want)) {
		t.Fatalf("accepted a CSR naming %v for an order of %v", sortedKeys(got), sortedKeys(want))
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ---- FuzzNormalizeIdentifier ----

var identSeeds = []struct {
	name string
	id   acme.Identifier
}{
	{"ok-dns", dnsIdent("a.example.com")},
	{"ok-wildcard", dnsIdent("*.Example.COM")},
	{"ok-a-label", dnsIdent("xn--bcher-kva.example")},
	{"ok-ipv6", ipIdent("2001:DB8::1")},
	{"ok-ipv4-mapped", ipIdent("::ffff:10.0.0.1")},
	{"fail-trailing-dot", dnsIdent("example.com.")},
	{"fail-ip-as-dns", dnsIdent("192.0.2.1")},
	{"fail-empty-label", dnsIdent("a..b")},
	{"fail-leading-hyphen", dnsIdent("-a.example")},
	{"fail-long-label", dnsIdent(label(64) + ".example")},
	{"fail-zone", ipIdent("fe80::1%eth0")},
	{"fail-prefix", ipIdent("1.2.3.4/8")},
	{"fail-email", acme.Identifier{Type: "email", Value: "a@example.com"}},
}

// FuzzNormalizeIdentifier checks the identifier syntax and the policy
// matcher on arbitrary input (RFC 8555 §7.1.3, RFC 8738): never a panic;
// what is accepted is canonical (normalizing again changes nothing),
// ASCII, and the policy answers for it.
func FuzzNormalizeIdentifier(f *testing.F) {
	pol := newPolicy(
		&IdentifierPolicy{Domains: []string{".example.com", "*.example.net", "host.example.org"}, IPRanges: []string{"10.0.0.0/8", "2001:db8::/32"}},
		&IdentifierPolicy{Domains: []string{"secret.example.com"}, IPRanges: []string{"10.0.0.0/24"}},
	)
	f.Fuzz(func(t *testing.T, typ, value string) {
		in := acme.Identifier{Type: typ, Value: value}
		got, wildcard, prob := normalizeIdentifier(in)
		if prob != nil {
			// As the client sent it, cut as a problem cuts what it
			// repeats (problem.Clip).
			if prob.Identifier == nil || *prob.Identifier != (acme.Identifier{Type: problem.Clip(typ), Value: problem.Clip(value)}) {
				t.Fatalf("subproblem for %q names %+v", value, prob.Identifier)
			}
			return
		}
		again, wildcard2, prob := normalizeIdentifier(got)
		if prob != nil || again != got || wildcard2 != wildcard {
			t.Fatalf("%+v normalizes to %+v, which normalizes to %+v (%v): not idempotent", in, got, again, prob)
		}
		switch got.Type {
		case acme.IdentifierDNS:
			if wildcard != strings.HasPrefix(got.Value, "*.") {
				t.Fatalf("%q: wildcard=%v", got.Value, wildcard)
			}
			// The client's name, only lower-cased: nothing non-ASCII
			// is folded into an LDH name.
			if len(got.Value) != len(value) || !strings.EqualFold(got.Value, value) || got.Value != strings.ToLower(got.Value) {
				t.Fatalf("%q normalized to %q", value, got.Value)
			}
			for i := 0; i < len(value); i++ {
				if value[i] >= 0x80 {
					t.Fatalf("accepted non-ASCII name %q", value)
				}
			}
		case acme.IdentifierIP:
			a, err := netip.ParseAddr(got.Value)
			if err != nil || a.String() != got.Value || a.Is4In6() || a.Zone() != "" || wildcard {
				t.Fatalf("%q normalized to non-canonical address %q", value, got.Value)
			}
		default:
			t.Fatalf("accepted identifier type %q", got.Type)
		}
		if p := pol.check(got); p != nil && (p.Identifier == nil || p.Identifier.Value != got.Value) {
			t.Fatalf("policy subproblem for %q names %+v", got.Value, p.Identifier)
		}
	})
}

// ---- the seed corpus ----

// corpusFile encodes values the way go test reads a corpus file.
func corpusFile(values ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		default:
			panic(fmt.Sprintf("corpusFile: %T", v))
		}
	}
	return b.Bytes()
}

// TestWriteFuzzSeedCorpus regenerates testdata/fuzz when asked to.
func TestWriteFuzzSeedCorpus(t *testing.T) {
	if os.Getenv("ACMEPROXY_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set ACMEPROXY_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz")
	}
	write := func(target, name string, content []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fx := newFuzzFixture(t)
	for _, s := range fileSeeds(t, fx) {
		write("FuzzVerifyJWS", s.name, corpusFile(s.body, s.mode))
	}
	for _, s := range csrSeeds(t, fx.keys) {
		write("FuzzCheckCSR", s.name, corpusFile(s.body))
	}
	for _, s := range identSeeds {
		write("FuzzNormalizeIdentifier", s.name, corpusFile(s.id.Type, s.id.Value))
	}
}

// TestFuzzSeedsMeanWhatTheirNamesSay keeps the stored corpus honest: an
// "ok-" seed must be accepted and a "fail-" seed refused, so a corpus
// that rotted (a changed nonce key, say) does not silently stop reaching
// the code behind the checks it was written for.
func TestFuzzSeedsMeanWhatTheirNamesSay(t *testing.T) {
	fx := newFuzzFixture(t)
	ctx := context.Background()
	verify := func(body []byte, mode uint8) error {
		defer func() { _, _ = fx.db.PruneNonces(ctx, fuzzStart.Add(100*nonceLifetime)) }()
		m := fuzzModes[int(mode)%len(fuzzModes)]
		if !m.useNonce {
			_, err := fx.srv.verifyJWS(ctx, body, fuzzBase, m.url, m.mode, false)
			return err
		}
		r := httptest.NewRequest("POST", m.url, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/jose+json")
		_, err := fx.srv.verify(ctx, r, m.mode)
		return err
	}
	seeds := runtimeSeeds(t, fx)
	jwsCorpus := corpus(t, "FuzzVerifyJWS")
	for _, name := range slices.Sorted(maps.Keys(jwsCorpus)) {
		v := jwsCorpus[name]
		seeds = append(seeds, fuzzSeed{name, v[0].([]byte), v[1].(uint8)})
	}
	for _, s := range seeds {
		t.Run(s.name, func(t *testing.T) {
			err := verify(s.body, s.mode)
			switch {
			case strings.HasPrefix(s.name, "ok-") && err != nil:
				t.Errorf("refused: %v", err)
			case strings.HasPrefix(s.name, "fail-") && err == nil:
				t.Errorf("accepted")
			}
		})
	}
	identCorpus := corpus(t, "FuzzNormalizeIdentifier")
	for _, name := range slices.Sorted(maps.Keys(identCorpus)) {
		v := identCorpus[name]
		t.Run("identifier/"+name, func(t *testing.T) {
			_, _, prob := normalizeIdentifier(acme.Identifier{Type: v[0].(string), Value: v[1].(string)})
			switch {
			case strings.HasPrefix(name, "ok-") && prob != nil:
				t.Errorf("refused: %v", prob)
			case strings.HasPrefix(name, "fail-") && prob == nil:
				t.Errorf("accepted")
			}
		})
	}
	csrCorpus := corpus(t, "FuzzCheckCSR")
	for _, name := range slices.Sorted(maps.Keys(csrCorpus)) {
		v := csrCorpus[name]
		t.Run("csr/"+name, func(t *testing.T) {
			csr, err := x509.ParseCertificateRequest(v[0].([]byte))
			if err == nil {
				err = authority.CheckCSR(csr, fuzzOrder, jwkOf(t, fx.keys.p256.Public()))
			}
			switch {
			case strings.HasPrefix(name, "ok-") && err != nil:
				t.Errorf("refused: %v", err)
			case strings.HasPrefix(name, "fail-") && err == nil:
				t.Errorf("accepted")
			}
		})
	}
}

// readCorpusFile reads a corpus file as corpusFile wrote it.
func readCorpusFile(t *testing.T, path string) []any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a corpus file", path)
	}
	var out []any
	for _, l := range lines[1:] {
		typ, lit, ok := strings.Cut(strings.TrimSuffix(l, ")"), "(")
		if !ok {
			t.Fatalf("%s: cannot read %q", path, l)
		}
		v, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		switch typ {
		case "[]byte":
			out = append(out, []byte(v))
		case "string":
			out = append(out, v)
		case "byte", "uint8":
			out = append(out, uint8([]rune(v)[0]))
		default:
			t.Fatalf("%s: cannot read %q", path, l)
		}
	}
	return out
}

// corpus reads every file of a target's stored corpus.
func corpus(t *testing.T, target string) map[string][]any {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, e := range entries {
		out[e.Name()] = readCorpusFile(t, filepath.Join(dir, e.Name()))
	}
	return out
}
