package acmeproxy

import (
	"encoding/pem"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"

	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"slices"
	"strings"
	"testing"

	josejson "github.com/go-jose/go-jose/v4/json"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The payload fuzzers take over where FuzzVerifyJWS stops: each input is
// the payload of a request whose JWS is good (signed by a key the server
// accepts, over the right url, with a fresh nonce), served through the
// real handler. Whatever the payload, the answer is a success or an ACME
// problem document with a 4xx status — never a 5xx, never a panic — and
// what the handler did must be what the payload asked, and nothing when
// it refused.
//
// A payload may name things that exist only at run time through
// placeholders, replaced before signing: $CERT (an unrevoked certificate
// of this run, base64url DER), $ACCOUNT (the signing account's URL) and
// $OLDKEY (its key as a JWK).

// payloadSeed is a seed with the answer it is written to get: "" for a
// success, else the problem type. TestPayloadFuzzSeedsGetTheAnswersTheyAreWrittenFor
// holds the seeds to it, so they keep reaching what they were written for.
type payloadSeed struct {
	name    string
	payload string
	flag    bool // the fuzzer's second input: update, or signed by the certificate's key
	want    acme.ProblemType
}

// serve signs payload with key — under kid, or as a jwk when kid is empty
// — as a request to url with a fresh nonce, and serves it.
func (fx *fuzzFixture) serve(tb testing.TB, url string, key crypto.Signer, kid string, payload []byte) *httptest.ResponseRecorder {
	tb.Helper()
	hdr := map[string]any{"alg": algOf(key), "nonce": fx.nonce(), "url": url}
	if kid != "" {
		hdr["kid"] = kid
	} else {
		hdr["jwk"] = jwkOf(tb, key.Public())
	}
	r := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(marshal(tb, flatJWS(tb, key, hdr, string(payload)))))
	r.Header.Set("Content-Type", "application/jose+json")
	w := httptest.NewRecorder()
	fx.srv.ServeHTTP(w, r)
	return w
}

// checkAnswer fails t unless w is one of the success statuses ok, or a
// well-formed problem document (RFC 7807 §3, RFC 8555 §6.7) of a client
// error. It returns the problem, nil for a success.
func checkAnswer(t testing.TB, what string, w *httptest.ResponseRecorder, ok ...int) *problem.Problem {
	t.Helper()
	if slices.Contains(ok, w.Code) {
		return nil
	}
	body := w.Body.Bytes()
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("%s: answered %d %s; a client's payload gets a success or a 4xx problem", what, w.Code, body)
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("%s: a %d answer of type %q, not %s: %s", what, w.Code, ct, problem.ContentType, body)
	}
	var p problem.Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s: the problem document does not decode: %v: %s", what, err, body)
	}
	if !strings.HasPrefix(string(p.Type), "urn:ietf:params:acme:error:") || p.Status != w.Code || p.Detail == "" {
		t.Fatalf("%s: a %d answer with an ill-formed problem: %s", what, w.Code, body)
	}
	for _, sub := range p.Subproblems {
		if !strings.HasPrefix(string(sub.Type), "urn:ietf:params:acme:error:") || sub.Identifier == nil {
			t.Fatalf("%s: an ill-formed subproblem: %s", what, body)
		}
	}
	return &p
}

// wantAnswer is how the seed test holds a seed to its expected answer.
func wantAnswer(t *testing.T, s payloadSeed, got *problem.Problem) {
	t.Helper()
	switch {
	case s.want == "" && got != nil:
		t.Fatalf("refused with %s: %s", got.Type, got.Detail)
	case s.want != "" && got == nil:
		t.Fatalf("accepted, want %s", s.want)
	case s.want != "" && got.Type != s.want:
		t.Fatalf("refused with %s (%s), want %s", got.Type, got.Detail, s.want)
	}
}

// acceptedContacts fails t unless each contact is what RFC 8555 §7.3 and
// this server accept: a mailto: URL (the scheme in any case, RFC 3986
// §3.1) of exactly one bare address, without header fields.
func acceptedContacts(t testing.TB, contacts []string) {
	t.Helper()
	for _, c := range contacts {
		scheme, addr, ok := strings.Cut(c, ":")
		if !ok || !strings.EqualFold(scheme, "mailto") || strings.ContainsAny(addr, "?,") {
			t.Fatalf("accepted contact %q", c)
		}
		if a, err := mail.ParseAddress(addr); err != nil || a.Name != "" || a.Address != addr {
			t.Fatalf("accepted contact %q, which is not one bare address", c)
		}
	}
}

// ---- FuzzAccountPayload: new-account and account update ----

var accountSeeds = []payloadSeed{
	{"ok-new-account-with-contacts", `{"termsOfServiceAgreed":true,"contact":["mailto:a@example.com","mailto:b@example.org"]}`, false, ""},
	{"ok-new-account-without-contacts", `{}`, false, ""},
	{"ok-new-account-scheme-in-upper-case", `{"contact":["MAILTO:a@example.com","Mailto:b@example.org"]}`, false, ""},
	{"fail-new-account-tel-contact", `{"contact":["tel:+15551234"]}`, false, acme.ErrorUnsupportedContact},
	{"fail-new-account-two-addresses", `{"contact":["mailto:a@example.com,b@example.com"]}`, false, acme.ErrorInvalidContact},
	{"fail-new-account-header-fields", `{"contact":["mailto:a@example.com?subject=hi"]}`, false, acme.ErrorInvalidContact},
	{"fail-new-account-display-name", `{"contact":["mailto:Alice <a@example.com>"]}`, false, acme.ErrorInvalidContact},
	{"fail-new-account-empty-mailto", `{"contact":["mailto:"]}`, false, acme.ErrorInvalidContact},
	{"fail-new-account-contact-not-a-list", `{"contact":"mailto:a@example.com"}`, false, acme.ErrorMalformed},
	{"fail-new-account-not-an-object", `["mailto:a@example.com"]`, false, acme.ErrorMalformed},
	{"fail-new-account-post-as-get", ``, false, acme.ErrorMalformed},
	{"fail-new-account-only-return-existing", `{"onlyReturnExisting":true}`, false, acme.ErrorAccountDoesNotExist},
	{"ok-update-contacts", `{"contact":["mailto:new@example.com"]}`, true, ""},
	{"ok-update-clear-contacts", `{"contact":[]}`, true, ""},
	{"ok-update-null-contact-changes-nothing", `{"contact":null}`, true, ""},
	{"ok-update-deactivate", `{"status":"deactivated"}`, true, ""},
	{"ok-update-post-as-get", ``, true, ""},
	{"ok-update-status-revoked-is-ignored", `{"status":"revoked"}`, true, ""},
	{"ok-update-terms-agreed-is-ignored", `{"termsOfServiceAgreed":false}`, true, ""},
	{"ok-update-status-in-another-case-is-ignored", `{"Status":"deactivated"}`, true, ""},
	{"fail-update-status-twice", `{"status":"valid","status":"deactivated"}`, true, acme.ErrorMalformed},
	{"fail-update-terms-agreed-a-string", `{"termsOfServiceAgreed":"true","contact":["mailto:new@example.com"]}`, true, acme.ErrorMalformed},
	{"fail-update-tel-contact", `{"contact":["tel:+15551234"]}`, true, acme.ErrorUnsupportedContact},
	{"fail-update-quoted-local-part", `{"contact":["mailto:\"a,b\"@example.com"]}`, true, acme.ErrorInvalidContact},
}

// accountPayload serves payload as a new-account request with a key no
// account has (update false), or as an update of a new account's own
// account (update true), and checks what became of the account.
func (fx *fuzzFixture) accountPayload(t testing.TB, payload []byte, update bool) *problem.Problem {
	t.Helper()
	ctx := context.Background()
	key := newKey(t)
	tp := fuzzThumbprint(t, key.Public())
	// What the payload asks, read independently of the handler: its
	// member names case-sensitively (go-jose's decoder, see
	// decodePayload).
	var asked struct {
		Contact *[]string `json:"contact"`
		Status  string    `json:"status"`
	}
	askErr := josejson.Unmarshal(payload, &asked)

	if !update {
		prob := checkAnswer(t, "new-account", fx.serve(t, fuzzBase+"/new-account", key, "", payload), http.StatusCreated)
		stored, err := fx.db.AccountByKey(ctx, fuzzProfile, tp)
		if prob != nil {
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a new-account refused with %s created an account (err %v)", prob.Type, err)
			}
			return prob
		}
		if err != nil {
			t.Fatalf("new-account answered 201 but stored no account: %v", err)
		}
		if askErr != nil {
			t.Fatalf("created an account from a payload that is not a JSON object: %q", payload)
		}
		acceptedContacts(t, stored.Contact)
		if asked.Contact != nil && !slices.Equal(stored.Contact, *asked.Contact) {
			t.Fatalf("stored contacts %q, asked for %q", stored.Contact, *asked.Contact)
		}
		return nil
	}

	before := []string{"mailto:before@example.com"}
	acct, _, err := fx.db.CreateAccount(ctx, store.Account{Profile: fuzzProfile, Thumbprint: tp,
		KeyJWK: jwkOf(t, key.Public()), Contact: before}, fuzzStart)
	if err != nil {
		t.Fatal(err)
	}
	kid := fuzzBase + "/account/" + acct.ID
	prob := checkAnswer(t, "account update", fx.serve(t, kid, key, kid, payload), http.StatusOK)
	stored, err := fx.db.GetAccount(ctx, fuzzProfile, acct.ID)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := stored.Status == "valid" && slices.Equal(stored.Contact, before)
	switch {
	case prob != nil:
		if !unchanged {
			t.Fatalf("an update refused with %s changed the account to %s %q", prob.Type, stored.Status, stored.Contact)
		}
	case len(payload) == 0: // POST-as-GET
		if !unchanged {
			t.Fatalf("a POST-as-GET changed the account to %s %q", stored.Status, stored.Contact)
		}
	case askErr != nil:
		t.Fatalf("accepted an update that is not a JSON object: %q", payload)
	case asked.Status == "deactivated":
		if stored.Status != "deactivated" {
			t.Fatalf("a deactivation answered 200 left the account %s", stored.Status)
		}
	// Any other status is ignored (RFC 8555 §7.3.2): the contact, if
	// asked, is updated and the account stays valid.
	case asked.Contact != nil:
		acceptedContacts(t, stored.Contact)
		if stored.Status != "valid" || !slices.Equal(stored.Contact, *asked.Contact) {
			t.Fatalf("a contact update to %q left the account %s %q", *asked.Contact, stored.Status, stored.Contact)
		}
	case !unchanged:
		t.Fatalf("an update asking nothing changed the account to %s %q", stored.Status, stored.Contact)
	}
	return prob
}

// FuzzAccountPayload fuzzes the payload of new-account (update false) and
// of an account update (update true): contacts, status and the rest.
func FuzzAccountPayload(f *testing.F) {
	fx := newFuzzFixture(f)
	for _, s := range accountSeeds {
		f.Add([]byte(s.payload), s.flag)
	}
	f.Fuzz(func(t *testing.T, payload []byte, update bool) {
		fx.accountPayload(t, payload, update)
	})
}

// ---- shared: orders made ready in the store, certificates issued ----

// readyOrder stores an order of the P-256 account for names whose every
// authorization is valid, as if the client had proved them.
func (fx *fuzzFixture) readyOrder(tb testing.TB, names ...string) store.Order {
	tb.Helper()
	ctx := context.Background()
	o := store.Order{Profile: fuzzProfile, AccountID: fx.accountID(), Expires: fuzzStart.Add(authority.OrderLifetime)}
	authzs := make([]store.Authz, len(names))
	for i, n := range names {
		o.Identifiers = append(o.Identifiers, acme.Identifier{Type: acme.IdentifierDNS, Value: n})
		authzs[i] = store.Authz{Identifier: acme.Identifier{Type: acme.IdentifierDNS, Value: n}, Expires: o.Expires,
			Challenges: []store.Challenge{{Type: acme.ChallengeHTTP01, Token: store.NewID()}}}
	}
	o, err := fx.db.CreateOrder(ctx, o, authzs, fuzzStart)
	if err != nil {
		tb.Fatal(err)
	}
	for _, id := range o.AuthzIDs {
		a, err := fx.db.GetAuthz(ctx, fuzzProfile, id)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := fx.db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, fuzzStart); err != nil {
			tb.Fatal(err)
		}
	}
	if o, err = fx.db.GetOrder(ctx, fuzzProfile, o.ID); err != nil || o.Status != "ready" {
		tb.Fatalf("order %s is %s (%v), want ready", o.ID, o.Status, err)
	}
	return o
}

// accountID is the P-256 account's id.
func (fx *fuzzFixture) accountID() string { return strings.TrimPrefix(fx.kidP, fuzzBase+"/account/") }

// fuzzCert is a certificate the P-256 account obtained.
type fuzzCert struct {
	der    []byte
	key    *ecdsa.PrivateKey
	serial string
}

// issue has the P-256 account obtain a certificate through finalize.
func (fx *fuzzFixture) issue(tb testing.TB) fuzzCert {
	tb.Helper()
	o := fx.readyOrder(tb, "revoke.example.com")
	key := newKey(tb)
	csr := newCSR(tb, key, "", []string{"revoke.example.com"}, nil)
	w := fx.serve(tb, fuzzBase+"/order/"+o.ID+"/finalize", fx.keys.p256, fx.kidP, marshal(tb, map[string]string{"csr": b64(csr)}))
	if w.Code != http.StatusOK {
		tb.Fatalf("finalize: %d %s", w.Code, w.Body)
	}
	c, err := fx.db.CertificateOfOrder(context.Background(), o.ID)
	if err != nil {
		tb.Fatal(err)
	}
	der, _, err := storedLeaf(c)
	if err != nil {
		tb.Fatal(err)
	}
	return fuzzCert{der: der, key: key, serial: c.Serial}
}

// ---- FuzzRevokeCertPayload ----

// revokeFixture keeps one unrevoked certificate at hand.
type revokeFixture struct {
	*fuzzFixture
	cert fuzzCert
}

// revokeSeeds are revoke-cert payloads; in seeds only, $FOREIGN is a
// certificate this profile did not issue.
var revokeSeeds = []payloadSeed{
	{"ok-by-account-without-reason", `{"certificate":"$CERT"}`, false, ""},
	{"ok-by-account-superseded", `{"certificate":"$CERT","reason":4}`, false, ""},
	{"ok-by-certificate-key-key-compromise", `{"certificate":"$CERT","reason":1}`, true, ""},
	{"ok-by-certificate-key-reason-0", `{"certificate":"$CERT","reason":0}`, true, ""},
	{"fail-reason-7-is-unassigned", `{"certificate":"$CERT","reason":7}`, false, acme.ErrorBadRevocationReason},
	{"fail-reason-11", `{"certificate":"$CERT","reason":11}`, true, acme.ErrorBadRevocationReason},
	{"fail-reason-negative", `{"certificate":"$CERT","reason":-1}`, false, acme.ErrorBadRevocationReason},
	{"fail-reason-a-string", `{"certificate":"$CERT","reason":"1"}`, false, acme.ErrorMalformed},
	{"fail-reason-twice", `{"certificate":"$CERT","reason":0,"reason":1}`, false, acme.ErrorMalformed},
	{"ok-reason-in-another-case-is-no-reason", `{"certificate":"$CERT","Reason":1}`, true, ""},
	{"fail-reason-huge", `{"certificate":"$CERT","reason":99999999999999999999}`, false, acme.ErrorMalformed},
	{"fail-certificate-not-base64url", `{"certificate":"$$$"}`, false, acme.ErrorMalformed},
	{"fail-certificate-padded-base64", `{"certificate":"$CERT=="}`, false, acme.ErrorMalformed},
	{"fail-certificate-not-der", `{"certificate":"AAAA"}`, true, acme.ErrorMalformed},
	{"fail-certificate-missing", `{"reason":1}`, false, acme.ErrorMalformed},
	{"fail-certificate-not-issued-here", `{"certificate":"$FOREIGN"}`, false, acme.ErrorUnauthorized},
	{"fail-not-an-object", `"$CERT"`, false, acme.ErrorMalformed},
	{"fail-post-as-get", ``, true, acme.ErrorMalformed},
}

// revokePayload serves payload as a revoke-cert of the fixture's current
// certificate, signed by the account that ordered it or (byCertKey) by the
// certificate's own key, and checks the certificate was revoked as asked
// or not at all.
func (fx *revokeFixture) revokePayload(t testing.TB, payload []byte, byCertKey bool) *problem.Problem {
	t.Helper()
	ctx := context.Background()
	payload = bytes.ReplaceAll(payload, []byte("$CERT"), []byte(b64(fx.cert.der)))
	var w *httptest.ResponseRecorder
	if byCertKey {
		w = fx.serve(t, fuzzBase+"/revoke-cert", fx.cert.key, "", payload)
	} else {
		w = fx.serve(t, fuzzBase+"/revoke-cert", fx.keys.p256, fx.kidP, payload)
	}
	prob := checkAnswer(t, "revoke-cert", w, http.StatusOK)
	found, err := fx.db.CertificatesBySerial(ctx, fuzzProfile, fx.cert.serial)
	if err != nil || len(found) != 1 {
		t.Fatalf("the certificates with serial %s: %d, %v; want 1", fx.cert.serial, len(found), err)
	}
	stored := found[0]
	if prob != nil {
		if !stored.RevokedAt.IsZero() {
			t.Fatalf("a revocation refused with %s revoked the certificate", prob.Type)
		}
		return prob
	}
	// Revoked: it must have been asked for this certificate, with a
	// reason RFC 5280 §5.3.1 assigns (or none), and recorded with it.
	var asked struct {
		Certificate string `json:"certificate"`
		Reason      *int   `json:"reason"`
	}
	if err := josejson.Unmarshal(payload, &asked); err != nil {
		t.Fatalf("revoked for a payload that is not a JSON object: %q", payload)
	}
	if der, err := base64.RawURLEncoding.DecodeString(asked.Certificate); err != nil || !bytes.Equal(der, fx.cert.der) {
		t.Fatalf("revoked for a payload naming another certificate: %q", payload)
	}
	if r := asked.Reason; r != nil && (*r < 0 || *r > 10 || *r == 7) {
		t.Fatalf("revoked with reason %d, which RFC 5280 does not assign", *r)
	}
	if stored.RevokedAt.IsZero() || (asked.Reason == nil) != (stored.Reason == nil) ||
		(asked.Reason != nil && *asked.Reason != *stored.Reason) {
		t.Fatalf("revoke-cert answered 200; stored revocation %v reason %v, asked reason %v", stored.RevokedAt, stored.Reason, asked.Reason)
	}
	fx.cert = fx.issue(t) // the next input gets an unrevoked one
	return nil
}

func newRevokeFixture(tb testing.TB) *revokeFixture {
	fx := &revokeFixture{fuzzFixture: newFuzzFixture(tb)}
	fx.cert = fx.issue(tb)
	return fx
}

// foreignCert is a certificate this profile did not issue.
func foreignCert(tb testing.TB) string {
	root, _ := newTestCA(tb)
	return b64(root.Raw)
}

// FuzzRevokeCertPayload fuzzes the revoke-cert payload (RFC 8555 §7.6),
// signed by the ordering account (kid) or by the certificate's key (jwk).
func FuzzRevokeCertPayload(f *testing.F) {
	fx := newRevokeFixture(f)
	foreign := foreignCert(f)
	for _, s := range revokeSeeds {
		f.Add([]byte(strings.ReplaceAll(s.payload, "$FOREIGN", foreign)), s.flag)
	}
	f.Fuzz(func(t *testing.T, payload []byte, byCertKey bool) {
		fx.revokePayload(t, payload, byCertKey)
	})
}

// ---- FuzzKeyChangePayload: the inner payload ----

var keyChangeSeeds = []payloadSeed{
	{"ok-key-change", `{"account":"$ACCOUNT","oldKey":$OLDKEY}`, false, ""},
	{"ok-key-change-members-reversed", `{"oldKey":$OLDKEY,"account":"$ACCOUNT"}`, false, ""},
	{"fail-another-account", `{"account":"https://acme.test/acme/fuzz/account/someone-else","oldKey":$OLDKEY}`, false, acme.ErrorUnauthorized},
	{"fail-account-of-another-profile", `{"account":"https://acme.test/acme/other/account/x","oldKey":$OLDKEY}`, false, acme.ErrorUnauthorized},
	{"fail-old-key-not-the-accounts", `{"account":"$ACCOUNT","oldKey":$OTHERKEY}`, false, acme.ErrorUnauthorized},
	{"fail-old-key-not-a-key", `{"account":"$ACCOUNT","oldKey":{"kty":"EC"}}`, false, acme.ErrorMalformed},
	{"fail-old-key-a-string", `{"account":"$ACCOUNT","oldKey":"key"}`, false, acme.ErrorMalformed},
	{"fail-old-key-missing", `{"account":"$ACCOUNT"}`, false, acme.ErrorMalformed},
	{"fail-old-key-private", `{"account":"$ACCOUNT","oldKey":$PRIVATEKEY}`, false, acme.ErrorMalformed},
	{"fail-null", `null`, false, acme.ErrorMalformed},
	{"fail-not-an-object", `[1]`, false, acme.ErrorMalformed},
	{"fail-empty", ``, false, acme.ErrorMalformed},
}

// keyChangeFixture has a key to change the P-256 account to.
type keyChangeFixture struct {
	*fuzzFixture
	newKey *ecdsa.PrivateKey
}

// keyChangePayload serves a key change of the P-256 account to the
// fixture's new key whose inner JWS carries payload, and checks the
// account moved to the new key exactly when the payload names the
// account and its current key — and is put back afterwards.
func (fx *keyChangeFixture) keyChangePayload(t testing.TB, payload []byte) *problem.Problem {
	t.Helper()
	ctx := context.Background()
	oldJWK := jwkOf(t, fx.keys.p256.Public())
	oldTP, newTP := fuzzThumbprint(t, fx.keys.p256.Public()), fuzzThumbprint(t, fx.newKey.Public())
	payload = bytes.ReplaceAll(payload, []byte("$ACCOUNT"), []byte(fx.kidP))
	payload = bytes.ReplaceAll(payload, []byte("$OLDKEY"), oldJWK)
	url := fuzzBase + "/key-change"
	inner := flatJWS(t, fx.newKey, map[string]any{"alg": algOf(fx.newKey), "jwk": jwkOf(t, fx.newKey.Public()), "url": url}, string(payload))
	prob := checkAnswer(t, "key-change", fx.serve(t, url, fx.keys.p256, fx.kidP, marshal(t, inner)), http.StatusOK)
	stored, err := fx.db.GetAccount(ctx, fuzzProfile, fx.accountID())
	if err != nil {
		t.Fatal(err)
	}
	if prob != nil {
		if stored.Thumbprint != oldTP || !bytes.Equal(stored.KeyJWK, oldJWK) {
			t.Fatalf("a key change refused with %s changed the account's key", prob.Type)
		}
		return prob
	}
	var asked struct {
		Account string          `json:"account"`
		OldKey  json.RawMessage `json:"oldKey"`
	}
	if err := josejson.Unmarshal(payload, &asked); err != nil {
		t.Fatalf("changed the key for an inner payload that is not a JSON object: %q", payload)
	}
	old, err := parsePublicJWK(asked.OldKey)
	if asked.Account != fx.kidP || err != nil || fuzzThumbprint(t, old.Key) != oldTP {
		t.Fatalf("changed the key for an inner payload naming account %q and old key %s", asked.Account, asked.OldKey)
	}
	if stored.Thumbprint != newTP {
		t.Fatalf("key-change answered 200 and left the account's key at %s", stored.Thumbprint)
	}
	// Back to the old key, for the next input.
	if _, err := fx.db.ChangeAccountKey(ctx, fx.accountID(), newTP, oldTP, oldJWK, fuzzStart); err != nil {
		t.Fatal(err)
	}
	return nil
}

// keyChangeSeedPayload fills the placeholders only the seeds use: $OTHERKEY
// (a key that is not the account's) and $PRIVATEKEY (the account's key
// with its private part).
func keyChangeSeedPayload(tb testing.TB, fx *keyChangeFixture, s payloadSeed) []byte {
	priv, err := json.Marshal(jwkPrivate(tb, fx.keys.p256))
	if err != nil {
		tb.Fatal(err)
	}
	p := strings.ReplaceAll(s.payload, "$OTHERKEY", string(jwkOf(tb, fx.keys.ed.Public())))
	return []byte(strings.ReplaceAll(p, "$PRIVATEKEY", string(priv)))
}

// jwkPrivate is a private key as a JWK.
func jwkPrivate(tb testing.TB, k crypto.Signer) json.RawMessage {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(jwkOf(tb, k.Public()), &m); err != nil {
		tb.Fatal(err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		tb.Fatalf("jwkPrivate: %T", k)
	}
	d, err := ec.Bytes()
	if err != nil {
		tb.Fatal(err)
	}
	m["d"] = b64(d)
	return marshal(tb, m)
}

func newKeyChangeFixture(tb testing.TB) *keyChangeFixture {
	return &keyChangeFixture{fuzzFixture: newFuzzFixture(tb), newKey: newKey(tb)}
}

// FuzzKeyChangePayload fuzzes the inner payload of a key change (RFC 8555
// §7.3.5), in an inner JWS signed by the new key inside an outer JWS
// signed by the account.
func FuzzKeyChangePayload(f *testing.F) {
	fx := newKeyChangeFixture(f)
	for _, s := range keyChangeSeeds {
		f.Add(keyChangeSeedPayload(f, fx, s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		fx.keyChangePayload(t, payload)
	})
}

// ---- FuzzFinalizePayload ----

// finalizeNames are the names of every order a finalize payload is sent to.
var finalizeNames = []string{"a.example.com", "b.example.com"}

// finalizeSeeds are finalize payloads; in seeds only, $CSR is a good CSR
// for finalizeNames and each $CSR_* one with the thing wrong its name says.
var finalizeSeeds = []payloadSeed{
	{"ok-csr", `{"csr":"$CSR"}`, false, ""},
	{"ok-csr-with-common-name", `{"csr":"$CSR_CN"}`, false, ""},
	{"fail-csr-padded-base64", `{"csr":"$CSR=="}`, false, acme.ErrorMalformed},
	{"fail-csr-standard-base64", `{"csr":"+/+/"}`, false, acme.ErrorMalformed},
	{"fail-csr-empty", `{"csr":""}`, false, acme.ErrorMalformed},
	{"fail-csr-missing", `{}`, false, acme.ErrorMalformed},
	{"fail-csr-a-number", `{"csr":1}`, false, acme.ErrorMalformed},
	{"fail-csr-twice", `{"csr":"$CSR","csr":"$CSR"}`, false, acme.ErrorMalformed},
	{"fail-csr-not-der", `{"csr":"AAAA"}`, false, acme.ErrorBadCSR},
	{"fail-csr-missing-a-name", `{"csr":"$CSR_MISSING"}`, false, acme.ErrorBadCSR},
	{"fail-csr-extra-name", `{"csr":"$CSR_EXTRA"}`, false, acme.ErrorBadCSR},
	{"fail-csr-account-key", `{"csr":"$CSR_ACCOUNT_KEY"}`, false, acme.ErrorBadCSR},
	{"fail-not-an-object", `["$CSR"]`, false, acme.ErrorMalformed},
	{"fail-post-as-get", ``, false, acme.ErrorMalformed},
}

// finalizeSeedPayload fills a finalize seed's placeholders.
func finalizeSeedPayload(tb testing.TB, fx *finalizeFixture, s payloadSeed) []byte {
	key := newKey(tb)
	csrs := map[string][]byte{
		"$CSR_CN":          newCSR(tb, key, "a.example.com", finalizeNames, nil),
		"$CSR_MISSING":     newCSR(tb, key, "", finalizeNames[:1], nil),
		"$CSR_EXTRA":       newCSR(tb, key, "", append(slices.Clone(finalizeNames), "c.example.com"), nil),
		"$CSR_ACCOUNT_KEY": newCSR(tb, fx.keys.p256, "", finalizeNames, nil),
		"$CSR":             newCSR(tb, key, "", finalizeNames, nil),
	}
	p := s.payload
	for _, ph := range []string{"$CSR_CN", "$CSR_MISSING", "$CSR_EXTRA", "$CSR_ACCOUNT_KEY", "$CSR"} {
		p = strings.ReplaceAll(p, ph, b64(csrs[ph]))
	}
	return []byte(p)
}

// finalizeFixture keeps a ready order for finalizeNames at hand.
type finalizeFixture struct {
	*fuzzFixture
	order store.Order
}

func newFinalizeFixture(tb testing.TB) *finalizeFixture {
	fx := &finalizeFixture{fuzzFixture: newFuzzFixture(tb)}
	fx.order = fx.readyOrder(tb, finalizeNames...)
	return fx
}

// finalizePayload serves payload as the finalize of a ready order for
// finalizeNames, and checks a certificate was issued exactly when the
// payload's CSR is for the order, and then for that CSR's key and names.
func (fx *finalizeFixture) finalizePayload(t testing.TB, payload []byte) *problem.Problem {
	t.Helper()
	ctx := context.Background()
	o := fx.order
	defer func() {
		// An order refused before it was claimed stays ready and takes
		// the next input; one finalized (or failed) is replaced.
		if now, err := fx.db.GetOrder(ctx, fuzzProfile, o.ID); err != nil || now.Status != "ready" {
			fx.order = fx.readyOrder(t, finalizeNames...)
		}
	}()
	prob := checkAnswer(t, "finalize", fx.serve(t, fuzzBase+"/order/"+o.ID+"/finalize", fx.keys.p256, fx.kidP, payload), http.StatusOK)
	cert, certErr := fx.db.CertificateOfOrder(ctx, o.ID)
	after, err := fx.db.GetOrder(ctx, fuzzProfile, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if prob != nil {
		if !errors.Is(certErr, store.ErrNotFound) || after.Status == "valid" {
			t.Fatalf("a finalize refused with %s left the order %s with a certificate (err %v)", prob.Type, after.Status, certErr)
		}
		return prob
	}
	if certErr != nil || after.Status != "valid" {
		t.Fatalf("finalize answered 200; the order is %s, its certificate %v", after.Status, certErr)
	}
	var asked struct {
		CSR string `json:"csr"`
	}
	if err := josejson.Unmarshal(payload, &asked); err != nil {
		t.Fatalf("issued for a payload that is not a JSON object: %q", payload)
	}
	der, err := base64.RawURLEncoding.DecodeString(asked.CSR)
	if err != nil {
		t.Fatalf("issued for a csr that is not base64url: %q", asked.CSR)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatalf("issued for a csr that does not parse: %v", err)
	}
	// RFC 8555 §7.4: the CSR names exactly the order's identifiers.
	named := map[string]bool{}
	for _, n := range csr.DNSNames {
		named[strings.ToLower(n)] = true
	}
	if cn := csr.Subject.CommonName; cn != "" {
		named[strings.ToLower(cn)] = true
	}
	if got := slices.Sorted(maps.Keys(named)); !slices.Equal(got, finalizeNames) || len(csr.IPAddresses)+len(csr.EmailAddresses)+len(csr.URIs) > 0 {
		t.Fatalf("issued for a CSR naming %v %v, the order is for %v", got, csr.IPAddresses, finalizeNames)
	}
	_, leaf, err := storedLeaf(cert)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := x509.MarshalPKIXPublicKey(leaf.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	csrKey, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil || !bytes.Equal(leafKey, csrKey) {
		t.Fatalf("the certificate's key is not the CSR's")
	}
	if acctKey, err := x509.MarshalPKIXPublicKey(fx.keys.p256.Public()); err != nil || bytes.Equal(leafKey, acctKey) {
		t.Fatalf("issued a certificate for the account's own key")
	}
	if names := slices.Sorted(slices.Values(leaf.DNSNames)); !slices.Equal(names, finalizeNames) || len(leaf.IPAddresses)+len(leaf.EmailAddresses)+len(leaf.URIs) > 0 {
		t.Fatalf("issued for %v %v, the order is for %v", leaf.DNSNames, leaf.IPAddresses, finalizeNames)
	}
	return nil
}

// FuzzFinalizePayload fuzzes the finalize payload (RFC 8555 §7.4), each
// input sent to an order that is ready.
func FuzzFinalizePayload(f *testing.F) {
	fx := newFinalizeFixture(f)
	for _, s := range finalizeSeeds {
		f.Add(finalizeSeedPayload(f, fx, s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		fx.finalizePayload(t, payload)
	})
}

// TestPayloadFuzzSeedsGetTheAnswersTheyAreWrittenFor keeps the payload
// fuzzers' seeds honest: an "ok-" seed succeeds and a "fail-" seed gets
// the problem it names, so the fuzzers start from inputs that reach the
// handlers' every branch — a success included — and not from inputs all
// refused at the first check.
func TestPayloadFuzzSeedsGetTheAnswersTheyAreWrittenFor(t *testing.T) {
	accounts := newFuzzFixture(t)
	for _, s := range accountSeeds {
		t.Run("account/"+s.name, func(t *testing.T) {
			wantAnswer(t, s, accounts.accountPayload(t, []byte(s.payload), s.flag))
		})
	}
	revokes := newRevokeFixture(t)
	foreign := foreignCert(t)
	for _, s := range revokeSeeds {
		t.Run("revoke/"+s.name, func(t *testing.T) {
			wantAnswer(t, s, revokes.revokePayload(t, []byte(strings.ReplaceAll(s.payload, "$FOREIGN", foreign)), s.flag))
		})
	}
	keyChanges := newKeyChangeFixture(t)
	for _, s := range keyChangeSeeds {
		t.Run("key-change/"+s.name, func(t *testing.T) {
			wantAnswer(t, s, keyChanges.keyChangePayload(t, keyChangeSeedPayload(t, keyChanges, s)))
		})
	}
	finalizes := newFinalizeFixture(t)
	for _, s := range finalizeSeeds {
		t.Run("finalize/"+s.name, func(t *testing.T) {
			wantAnswer(t, s, finalizes.finalizePayload(t, finalizeSeedPayload(t, finalizes, s)))
		})
	}
}

// storedLeaf returns the DER and the parsed leaf of a stored chain.
func storedLeaf(c store.Certificate) ([]byte, *x509.Certificate, error) {
	block, _ := pem.Decode([]byte(c.ChainPEM))
	if block == nil {
		return nil, nil, fmt.Errorf("certificate %s: the stored chain holds no PEM block", c.ID)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	return block.Bytes, leaf, err
}
