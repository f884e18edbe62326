package acmeproxy

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/big"
	"mime"
	"net/http"
	"strings"
	"sync"

	jose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/internal/p256verify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// maxBodyBytes caps a signed request. The largest legitimate one is a
// finalize with an 8192-bit RSA CSR (a few KiB, base64url'd twice).
const maxBodyBytes = 64 << 10

// allowedAlgs are the JWS algorithms accepted for account keys
// (RFC 8555 §6.2: never "none", never a MAC).
var allowedAlgs = []string{string(jose.ES256), string(jose.ES384), string(jose.RS256), string(jose.EdDSA)}

// signedRequest is a POST that passed the verification step.
type signedRequest struct {
	payload   []byte
	postAsGet bool // empty payload (RFC 8555 §6.3)
	// Exactly one of account (kid) and jwk is set.
	account *store.Account
	jwk     *jose.JSONWebKey
	// thumbprint is the signing key's RFC 7638 SHA-256 thumbprint, base64url.
	thumbprint string
}

// keyMode is what a route accepts as the signer's identity.
type keyMode int

const (
	needKID  keyMode = iota // an existing account (most routes)
	needJWK                 // a bare key (new-account)
	kidOrJWK                // either (revoke-cert)
)

// flattenedJWS is RFC 7515 §7.2.2. Header and Signatures are there only
// to be refused (RFC 8555 §6.2: no unprotected header, one signature).
type flattenedJWS struct {
	Protected  string          `json:"protected"`
	Payload    *string         `json:"payload"`
	Signature  string          `json:"signature"`
	Header     json.RawMessage `json:"header"`
	Signatures json.RawMessage `json:"signatures"`
}

type protectedHeader struct {
	Alg string          `json:"alg"`
	JWK json.RawMessage `json:"jwk"`
	// KID is a pointer so that a header with "kid": "" beside a jwk has
	// both (RFC 8555 §6.2: servers MUST reject requests that contain both).
	KID *string `json:"kid"`
	// Nonce is a pointer so that an inner JWS of a key change with
	// "nonce": "" has one (RFC 8555 §7.3.5: it MUST omit it).
	Nonce *string         `json:"nonce"`
	URL   *string         `json:"url"`
	Crit  json.RawMessage `json:"crit"`
	// B64 is RFC 7797's unencoded payload option, which RFC 8555 §6.2
	// forbids: a header declaring it is refused, not read as if it
	// had not.
	B64 *bool `json:"b64"`
}

// nonce is the header's nonce, "" when it has none.
func (h *protectedHeader) nonce() string {
	if h.Nonce == nil {
		return ""
	}
	return *h.Nonce
}

// verify is the one verification step every signed request passes before
// any route logic, in this order: content type → size → flattened JWS →
// no crit, no "b64": false → exactly one of jwk/kid → kid resolves in this profile → alg
// allowed for the key → signature → url → nonce. The nonce comes last so a
// request that fails earlier does not burn it.
func (s *Server) verify(ctx context.Context, r *http.Request, mode keyMode) (*signedRequest, error) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/jose+json" {
		return nil, problem.UnsupportedMediaType(r.Header.Get("Content-Type"))
	}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return s.verifyJWS(ctx, body, s.baseURL(r), s.requestURL(r), mode, true)
}

// decodePayload unmarshals a JSON payload strictly enough to catch a
// client that sent something else: the payload must be one JSON object.
// encoding/json takes a literal null into a struct or map as "nothing to
// set", so null is refused here, not read as an empty object.
//
// Member names are read as JSON has them, by go-jose's decoder (the one
// the JWS around the payload is read with): case-sensitively, so
// "Status" beside or instead of "status" is a member RFC 8555 has the
// server ignore (§7.3.2, §7.6) rather than the one it knows —
// encoding/json would deactivate an authorization asked
// {"Status":"deactivated"}, or take {"TermsOfServiceAgreed":true} as
// agreement to the terms — and a member sent twice is refused rather
// than read as whichever came last.
func decodePayload(payload []byte, v any) error {
	if err := payloadIsObject(payload); err != nil {
		return err
	}
	if err := josejson.Unmarshal(payload, v); err != nil {
		// encoding/json's error names the member of a value of the wrong
		// type ("has a string where "contact" takes…"), which go-jose's
		// does not: the payload is refused either way, and described by
		// encoding/json when it finds a fault too.
		if jerr := json.Unmarshal(payload, v); jerr != nil {
			err = jerr
		}
		return problem.MalformedF("the request payload %s", problem.JSONFault(err))
	}
	return nil
}

// payloadIsObject refuses a payload that is not empty and not a JSON
// object.
func payloadIsObject(payload []byte) error {
	if t := bytes.TrimLeft(payload, " \t\r\n"); len(t) > 0 && t[0] != '{' {
		return problem.MalformedF("the request payload is not a JSON object")
	}
	return nil
}

// readBody reads a signed request's body, up to maxBodyBytes: at once
// into a buffer of the announced size when there is one (the server holds
// the body to its Content-Length), else growing as it comes.
func readBody(r *http.Request) ([]byte, error) {
	if cl := r.ContentLength; cl > maxBodyBytes {
		return nil, problem.TooLarge(maxBodyBytes)
	} else if cl > 0 {
		body := make([]byte, cl)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, problem.MalformedF("reading the request body failed")
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, problem.MalformedF("reading the request body failed")
	}
	if len(body) > maxBodyBytes {
		return nil, problem.TooLarge(maxBodyBytes)
	}
	return body, nil
}

// verifyJWS checks a flattened JWS. useNonce is false for the inner JWS of
// a key change, which must not carry one.
func (s *Server) verifyJWS(ctx context.Context, body []byte, base, wantURL string, mode keyMode, useNonce bool) (*signedRequest, error) {
	// go-jose's JSON decoder, the one ParseSignedJSON verifies with:
	// member names match case-sensitively (RFC 7515 §4) and duplicates
	// are refused, so the header checked here is the header signed.
	// encoding/json would let a trailing "Protected" member stand in for
	// "protected", or "URL" for "url".
	var fj flattenedJWS
	if err := josejson.Unmarshal(body, &fj); err != nil {
		return nil, problem.MalformedF("the request body is not a flattened JWS: it %s", problem.JSONFault(err))
	}
	if fj.Signatures != nil || fj.Header != nil {
		return nil, problem.MalformedF("the JWS must be flattened, with one signature and no unprotected header")
	}
	if fj.Protected == "" || fj.Payload == nil {
		return nil, problem.MalformedF("the JWS lacks its protected header or payload")
	}
	rawHdr, err := base64.RawURLEncoding.DecodeString(fj.Protected)
	if err != nil {
		return nil, problem.MalformedF("the JWS protected header is not base64url")
	}
	var hdr protectedHeader
	if err := josejson.Unmarshal(rawHdr, &hdr); err != nil {
		return nil, problem.MalformedF("the JWS protected header %s", headerFault(rawHdr, err))
	}
	if hdr.Crit != nil {
		return nil, problem.MalformedF("the JWS protected header has a crit parameter, which this server does not support")
	}
	if hdr.B64 != nil && !*hdr.B64 {
		return nil, problem.MalformedF("the JWS unencoded payload option (\"b64\": false) must not be used")
	}
	// Present is present: "jwk": null or "kid": "" is a member too.
	hasJWK, hasKID := hdr.JWK != nil, hdr.KID != nil
	if hasJWK == hasKID {
		return nil, problem.MalformedF("the JWS protected header must have exactly one of jwk and kid")
	}
	if !isAllowedAlg(hdr.Alg) {
		return nil, problem.BadSignatureAlgorithmF(allowedAlgs, "JWS algorithm %s is not supported", problem.Quote(hdr.Alg))
	}
	// After the algorithm: an unsecured JWS ("alg": "none") has an empty
	// signature, and its answer is the algorithm's refusal, which lists
	// the ones to use (RFC 8555 §6.2).
	if fj.Signature == "" {
		return nil, problem.MalformedF("the JWS has no signature")
	}

	req := &signedRequest{}
	var (
		key     *jose.JSONWebKey
		payload []byte
		kr      *kidRequest // for a request signed by kid
	)
	switch {
	case hasJWK && mode == needKID:
		return nil, problem.MalformedF("this request must be signed with an account key identified by kid")
	case hasKID && mode == needJWK:
		return nil, problem.MalformedF("this request must carry the new key as jwk, not a kid")
	case hasJWK:
		if key, err = parsePublicJWK(hdr.JWK); err != nil {
			return nil, err
		}
		if payload, err = verifyWith(&hdr, &fj, key, nil); err != nil {
			return nil, err
		}
		req.jwk = key
	default:
		kr = &kidRequest{s: s, hdr: &hdr, fj: &fj}
		if kr.id, err = s.accountIDOfKID(base, *hdr.KID); err != nil {
			return nil, err
		}
		if err := kr.verify(ctx, !useNonce); err != nil {
			return nil, err
		}
		key, payload, req.account = kr.key, kr.payload, kr.account
	}
	if hdr.URL == nil {
		return nil, problem.MalformedF("the JWS protected header has no url")
	}
	if *hdr.URL != wantURL {
		return nil, problem.URLMismatch(*hdr.URL, wantURL)
	}
	switch {
	case !useNonce:
		if hdr.Nonce != nil {
			return nil, problem.MalformedF("the inner JWS must not have a nonce")
		}
	case req.jwk != nil:
		if err := s.nonces.consume(ctx, s.cfg.Profile, hdr.nonce(), s.clock.Now()); err != nil {
			return nil, err
		}
	default:
		acct, err := s.nonces.consumeAs(ctx, s.cfg.Profile, hdr.nonce(), s.clock.Now(), kr.id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, problem.AccountDoesNotExistF("account %s does not exist", problem.Quote(*hdr.KID))
		}
		if err != nil {
			return nil, err
		}
		if err := kr.recheck(acct); err != nil {
			return nil, err
		}
		key, payload, req.account = kr.key, kr.payload, kr.account
	}
	// A deactivated account's key is no longer accepted for anything,
	// revocation included (RFC 8555 §7.3.6: the server MUST NOT accept
	// further requests authorized by that key); its certificates can
	// still be revoked by their own keys.
	if req.account != nil && req.account.Status != acme.StatusValid {
		return nil, problem.DeactivatedAccountF("account %s is %s", req.account.ID, req.account.Status)
	}
	if kr != nil && kr.key == key {
		req.thumbprint = kr.thumbprint
	} else if req.thumbprint, err = thumbprint(key); err != nil {
		return nil, problem.BadPublicKeyF("the key's thumbprint cannot be computed")
	}
	req.payload, req.postAsGet = payload, len(payload) == 0
	return req, nil
}

// headerFault says what is wrong with a protected header go-jose's
// decoder refused with err: not a JSON object, a member twice, or one of
// the wrong type, named as encoding/json names it ("has a number where
// "nonce" takes a string") — "is not a JSON object" for a header that is
// one would send a client looking in the wrong place.
func headerFault(raw []byte, err error) string {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return "is not a JSON object"
	}
	if jerr := json.Unmarshal(raw, &protectedHeader{}); jerr != nil {
		err = jerr
	}
	return problem.JSONFault(err)
}

func isAllowedAlg(alg string) bool {
	for _, a := range allowedAlgs {
		if a == alg {
			return true
		}
	}
	return false
}

// parsePublicJWK parses a JWK that must be a public key the key policy
// accepts (authority.GoodKey). It returns the key alone: the members a
// client may add beside it (kid, use, alg, x5c…, tens of KiB of them in
// a request's size) are no part of the key (RFC 7638 leaves them out of
// its thumbprint, the account's identity) and are not kept, so an
// account stores, and the verification caches remember, only its key.
func parsePublicJWK(raw []byte) (*jose.JSONWebKey, error) {
	var k jose.JSONWebKey
	if err := json.Unmarshal(raw, &k); err != nil {
		return nil, problem.BadPublicKeyF("the JWK %s", problem.JSONFault(err))
	}
	if !k.Valid() {
		return nil, problem.BadPublicKeyF("the JWK is not a valid key")
	}
	if !k.IsPublic() {
		return nil, problem.BadPublicKeyF("the JWK must be a public key")
	}
	if err := authority.GoodKey(k.Key); errors.Is(err, authority.ErrKeyType) {
		return nil, problem.BadPublicKeyF("the JWK's key type is not supported (use RSA, EC on P-256 or P-384, or OKP Ed25519)")
	} else if err != nil {
		return nil, problem.BadPublicKeyF("%s", err)
	}
	return &jose.JSONWebKey{Key: k.Key}, nil
}

// checkAlgForKey requires the algorithm to fit the key: ES256 with P-256,
// ES384 with P-384, RS256 with RSA, EdDSA with Ed25519.
func checkAlgForKey(alg string, key any) error {
	ok := false
	switch pub := key.(type) {
	case *ecdsa.PublicKey:
		ok = alg == string(jose.ES256) && pub.Curve == elliptic.P256() ||
			alg == string(jose.ES384) && pub.Curve == elliptic.P384()
	case *rsa.PublicKey:
		ok = alg == string(jose.RS256)
	case ed25519.PublicKey:
		ok = alg == string(jose.EdDSA)
	}
	if !ok {
		return problem.BadSignatureAlgorithmF(allowedAlgs, "JWS algorithm %q does not fit the account key", alg)
	}
	return nil
}

// accountIDOfKID is the account id a kid names, which must be this
// profile's account URL.
func (s *Server) accountIDOfKID(base, kid string) (string, error) {
	id, ok := strings.CutPrefix(kid, base+"/account/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", problem.AccountDoesNotExistF("kid %s is not an account URL of this profile", problem.Quote(kid))
	}
	return id, nil
}

// kidRequest verifies the signature of a request signed by an account.
type kidRequest struct {
	s   *Server
	hdr *protectedHeader
	fj  *flattenedJWS
	id  string
	// Set by verify.
	key        *jose.JSONWebKey
	thumbprint string // key's
	payload    []byte
	account    *store.Account // as read (or as remembered) before the nonce is spent
}

// verify checks the signature against the account's key: the one this
// profile remembers for the account (kidKeys) if any, else — or if that
// one does not verify — the one stored. fresh forces the stored one.
func (k *kidRequest) verify(ctx context.Context, fresh bool) error {
	var acct store.Account
	cached, ok := k.s.kidKeys.get(k.id)
	if ok && !fresh {
		acct = store.Account{ID: k.id, KeyJWK: cached}
		if err := k.check(acct); err == nil {
			return nil
		}
	}
	acct, err := k.s.db.GetAccount(ctx, k.s.cfg.Profile, k.id)
	if errors.Is(err, store.ErrNotFound) {
		return problem.AccountDoesNotExistF("account %s does not exist", problem.Quote(*k.hdr.KID))
	}
	if err != nil {
		return err
	}
	k.s.kidKeys.put(k.id, acct.KeyJWK)
	return k.check(acct)
}

// check verifies the signature with acct's key and keeps the result.
func (k *kidRequest) check(acct store.Account) error {
	pk, err := accountKey(acct.KeyJWK)
	if err != nil {
		return fmt.Errorf("stored key of account %s: %w", acct.ID, err)
	}
	payload, err := verifyWith(k.hdr, k.fj, pk.key, pk.p256)
	if err != nil {
		return err
	}
	k.key, k.thumbprint, k.payload, k.account = pk.key, pk.thumbprint, payload, &acct
	return nil
}

// verifyWith checks that the JWS's algorithm fits key and its signature
// verifies with it, and returns the payload. p256 is key's verifier when
// it is a remembered account's P-256 key, or nil.
func verifyWith(hdr *protectedHeader, fj *flattenedJWS, key *jose.JSONWebKey, p256 *p256verify.Key) ([]byte, error) {
	if err := checkAlgForKey(hdr.Alg, key.Key); err != nil {
		return nil, err
	}
	return verifySignature(hdr.Alg, key.Key, p256, fj.Protected, *fj.Payload, fj.Signature)
}

// recheck holds a verified signature against the account as read when the
// nonce was spent, which becomes the request's account: if its key is not
// the one verified with (a key change in between, or a remembered key
// that is no longer the account's), the signature must verify with the
// account's key as it now stands.
func (k *kidRequest) recheck(now store.Account) error {
	if bytes.Equal(now.KeyJWK, k.account.KeyJWK) {
		k.account = &now
		return nil
	}
	k.s.kidKeys.put(now.ID, now.KeyJWK)
	return k.check(now)
}

// boundedCache is a map safe for concurrent use that starts over when it
// holds maxCachedAccountKeys entries: the caches of the signed-request
// path hold what a reread would give again, so forgetting is harmless.
type boundedCache[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func (c *boundedCache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *boundedCache[V]) put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedAccountKeys {
		c.m = make(map[string]V)
	}
	c.m[k] = v
}

// kidKeyCache remembers, per account of a profile, the account's key as
// last read (its stored JWK text), so that a request signed by kid is
// verified without a read of a reader connection — which starts with a
// cold page cache after every write. It decides nothing: the nonce is
// spent in a write that reads the account (store.UseNonceAs), and the
// signature is held against the key found there.
type kidKeyCache = boundedCache[[]byte]

// thumbprint is a key's RFC 7638 SHA-256 thumbprint, base64url: the
// account's identity and the second half of key authorizations.
func thumbprint(k *jose.JSONWebKey) (string, error) {
	tp, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// accountKeys caches parsed account keys, with their thumbprints, by
// their stored JWK text. The text is the key, so an entry can never be
// stale: a key change stores a new text. Parsing a JWK on every signed
// request was a measurable share of a request's CPU.
var accountKeys boundedCache[parsedKey]

// parsedKey is a stored account key, parsed and checked, and its RFC 7638
// thumbprint; for a P-256 key also its verifier, which builds a table of
// the key's multiples once the key has signed twice (an account signs
// seven requests a certificate).
type parsedKey struct {
	key        *jose.JSONWebKey
	thumbprint string
	p256       *p256verify.Key
}

// maxCachedAccountKeys bounds those caches; past it a cache starts over.
const maxCachedAccountKeys = 10000

// accountKey returns the parsed, checked key of a stored account JWK and
// its thumbprint.
func accountKey(stored []byte) (parsedKey, error) {
	if pk, ok := accountKeys.get(string(stored)); ok {
		return pk, nil
	}
	k, err := parsePublicJWK(stored)
	if err != nil {
		return parsedKey{}, err
	}
	tp, err := thumbprint(k)
	if err != nil {
		return parsedKey{}, problem.BadPublicKeyF("the key's thumbprint cannot be computed")
	}
	pk := parsedKey{key: k, thumbprint: tp}
	if ec, ok := k.Key.(*ecdsa.PublicKey); ok && ec.Curve == elliptic.P256() {
		if pk.p256, err = p256verify.NewKey(ec); err != nil {
			return parsedKey{}, problem.BadPublicKeyF("the P-256 key is not on its curve")
		}
	}
	accountKeys.put(string(stored), pk)
	return pk, nil
}

// verifySignature checks a flattened JWS's signature over its signing input
// (RFC 7515 §5.2: ASCII(protected) "." ASCII(payload)) and returns the
// decoded payload. The header was already parsed above, and the algorithm
// checked against the key, so this verifies the parts in place instead of
// having a JOSE library parse the whole body a second time. p256, when
// not nil, is key's verifier.
func verifySignature(alg string, key any, p256 *p256verify.Key, protected, payload, signature string) ([]byte, error) {
	bad := problem.MalformedF("the JWS signature does not verify")
	sig, err := base64.RawURLEncoding.Strict().DecodeString(signature)
	if err != nil {
		return nil, problem.MalformedF("the JWS signature is not base64url")
	}
	body, err := base64.RawURLEncoding.Strict().DecodeString(payload)
	if err != nil {
		return nil, problem.MalformedF("the JWS payload is not base64url")
	}
	// The signing input is hashed in parts: no copy of the whole body.
	digest := func(h hash.Hash) []byte {
		io.WriteString(h, protected)
		io.WriteString(h, ".")
		io.WriteString(h, payload)
		return h.Sum(nil)
	}
	switch pub := key.(type) {
	case *ecdsa.PublicKey:
		size := (pub.Curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return nil, bad
		}
		var d []byte
		switch alg {
		case string(jose.ES256):
			d = digest(sha256.New())
		case string(jose.ES384):
			d = digest(sha512.New384())
		default:
			return nil, bad
		}
		if p256 != nil {
			if !p256.Verify(d, sig[:size], sig[size:]) {
				return nil, bad
			}
			break
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		if !ecdsa.Verify(pub, d, r, s) {
			return nil, bad
		}
	case *rsa.PublicKey:
		if alg != string(jose.RS256) || rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest(sha256.New()), sig) != nil {
			return nil, bad
		}
	case ed25519.PublicKey:
		if alg != string(jose.EdDSA) || !ed25519.Verify(pub, []byte(protected+"."+payload), sig) {
			return nil, bad
		}
	default:
		return nil, bad
	}
	return body, nil
}
