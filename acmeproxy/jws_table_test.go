package acmeproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// Once an account's key has signed twice, its requests are verified with
// the key's table of multiples (internal/p256verify): they are still
// accepted, and a request whose signature is not the account key's is
// still refused with the same problem as before.
func TestAnAccountsKeyWithItsTableStillRefusesSignaturesThatAreNotItsOwn(t *testing.T) {
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	for i := range 3 {
		if r := alice.post(alice.kid, nil, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("POST-as-GET %d of the account: %d %s", i, r.status, r.body)
		}
	}
	id := alice.kid[strings.LastIndex(alice.kid, "/")+1:]
	acct, err := e.db.GetAccount(t.Context(), e.srv.cfg.Profile, id)
	if err != nil {
		t.Fatal(err)
	}
	pk, ok := accountKeys.get(string(acct.KeyJWK))
	if !ok || pk.p256 == nil || !pk.p256.HasTable() {
		t.Fatalf("after three requests the account's key is cached %v with a table %v; want both", ok, ok && pk.p256 != nil && pk.p256.HasTable())
	}

	mallory, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cases := []struct {
		name string
		body func() []byte
	}{
		{"signed by another key under the account's kid", func() []byte {
			return alice.sign(alice.kid, nil, jwsOpts{key: mallory})
		}},
		{"the account's own signature with a bit changed", func() []byte {
			var m map[string]string
			json.Unmarshal(alice.sign(alice.kid, nil, jwsOpts{}), &m)
			sig, err := base64.RawURLEncoding.DecodeString(m["signature"])
			if err != nil {
				t.Fatal(err)
			}
			sig[40] ^= 0x01 // a bit of s
			m["signature"] = b64(sig)
			b, _ := json.Marshal(m)
			return b
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := alice.postRaw(alice.kid, "application/jose+json", c.body())
			if r.problem == nil || r.problem.Type != acme.ErrorMalformed || r.status != http.StatusBadRequest {
				t.Fatalf("answered %d %s; want 400 malformed", r.status, r.body)
			}
		})
	}
	if r := alice.post(alice.kid, nil, jwsOpts{}); r.status != http.StatusOK {
		t.Fatalf("the account's own request after the refusals: %d %s", r.status, r.body)
	}
}
