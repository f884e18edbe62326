package notify_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// hmacSHA256 is the signature a receiver computes: HMAC-SHA256 from the
// standard library, lower-case hex, independent of notify.Sign.
func hmacSHA256(key, msg []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// verifies is what a receiver of a webhook does with SignatureHeader:
// decode the hex and compare it, in constant time, with its own HMAC of
// the body under its copy of the secret.
func verifies(secret string, body []byte, header string) bool {
	got, err := hex.DecodeString(header)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// The vectors of RFC 4231 §4 (HMAC-SHA-256 rows; test case 5, a
// truncated output, left out) pin Sign to HMAC-SHA256 itself, so that
// a Sign which ignored its secret, hashed the body alone or used
// another hash would fail even if the delivery test compared it with
// itself. Each expected value is also recomputed with crypto/hmac.
func TestSignIsHMACSHA256ByTheKnownAnswersOfRFC4231(t *testing.T) {
	seq := func(from, to byte) []byte {
		var b []byte
		for c := from; c <= to; c++ {
			b = append(b, c)
		}
		return b
	}
	tests := []struct {
		name string
		key  []byte
		data []byte
		want string
	}{
		{"ok/test case 1: 20-byte key", bytes.Repeat([]byte{0x0b}, 20), []byte("Hi There"),
			"b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"ok/test case 2: a key shorter than the output", []byte("Jefe"), []byte("what do ya want for nothing?"),
			"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{"ok/test case 3: 50 bytes of 0xdd", bytes.Repeat([]byte{0xaa}, 20), bytes.Repeat([]byte{0xdd}, 50),
			"773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
		{"ok/test case 4: 25-byte key", seq(0x01, 0x19), bytes.Repeat([]byte{0xcd}, 50),
			"82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
		{"ok/test case 6: a key longer than the block", bytes.Repeat([]byte{0xaa}, 131),
			[]byte("Test Using Larger Than Block-Size Key - Hash Key First"),
			"60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
		{"ok/test case 7: key and data longer than the block", bytes.Repeat([]byte{0xaa}, 131),
			[]byte("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm."),
			"9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hmacSHA256(tt.key, tt.data); got != tt.want {
				t.Fatalf("crypto/hmac gives %s; the vector is %s", got, tt.want)
			}
			if got := notify.Sign(string(tt.key), tt.data); got != tt.want {
				t.Errorf("Sign = %s; want %s", got, tt.want)
			}
		})
	}
}

func TestSignDependsOnTheSecretAndTheBody(t *testing.T) {
	body := []byte(`{"event":"certificate_issued","order":"ord1"}`)
	base := notify.Sign("s3cret", body)
	if base != hmacSHA256([]byte("s3cret"), body) {
		t.Fatalf("Sign = %s; crypto/hmac gives %s", base, hmacSHA256([]byte("s3cret"), body))
	}
	for name, other := range map[string]string{
		"fail/another secret":              notify.Sign("s3cres", body),
		"fail/the secret with a byte more": notify.Sign("s3cret ", body),
		"fail/an empty secret":             notify.Sign("", body),
		"fail/another body":                notify.Sign("s3cret", append(bytes.Clone(body), ' ')),
	} {
		if other == base {
			t.Errorf("%s: the same signature %s", name, base)
		}
	}
}

var lowerHex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Two destinations with their own secrets get the same event: each
// request carries, in SignatureHeader, the lower-case hex HMAC-SHA256 of
// the body exactly as received, under that destination's secret, so
// that its receiver accepts it and a receiver holding any other secret
// (the other destination's, or none) refuses it.
func TestAWebhookSignatureVerifiesUnderItsDestinationsSecretOnly(t *testing.T) {
	rcvA, rcvB := newReceiver(t), newReceiver(t)
	a := notify.Destination{Type: notify.TypeWebhook, URL: rcvA.URL + "/a", Secret: "secret-of-a"}
	b := notify.Destination{Type: notify.TypeWebhook, URL: rcvB.URL + "/b", Secret: "secret-of-b"}
	r := newRig(t, notify.Options{}, a, b)
	ids := r.event(t, sampleEvent(acme.EventCertificateIssued), a, b)
	if len(ids) != 2 {
		t.Fatalf("%d delivery jobs, want 2", len(ids))
	}
	for _, id := range ids {
		if j := r.wait(t, id); j.Status != store.JobDone {
			t.Fatalf("job %d %s: %s", id, j.Status, j.LastError)
		}
	}
	for _, tc := range []struct {
		name   string
		rcv    *receiver
		secret string
		others []string
	}{
		{"a", rcvA, a.Secret, []string{b.Secret, "", "secret-of-A"}},
		{"b", rcvB, b.Secret, []string{a.Secret, "", "secret-of-"}},
	} {
		got := tc.rcv.deliveries()
		if len(got) != 1 {
			t.Fatalf("destination %s: %d deliveries, want 1", tc.name, len(got))
		}
		sig, body := got[0].header.Get(notify.SignatureHeader), got[0].body
		if !lowerHex64.MatchString(sig) {
			t.Errorf("destination %s: %s is %q, not 64 lower-case hex digits", tc.name, notify.SignatureHeader, sig)
		}
		if want := hmacSHA256([]byte(tc.secret), body); sig != want {
			t.Errorf("destination %s: %s = %s; HMAC-SHA256 of the body under its secret is %s", tc.name, notify.SignatureHeader, sig, want)
		}
		if !verifies(tc.secret, body, sig) {
			t.Errorf("destination %s: its receiver refuses the signature", tc.name)
		}
		for _, other := range tc.others {
			if verifies(other, body, sig) {
				t.Errorf("destination %s: a receiver with the secret %q accepts the signature", tc.name, other)
			}
		}
		if verifies(tc.secret, append(bytes.Clone(body), ' '), sig) {
			t.Errorf("destination %s: the signature still verifies over an altered body", tc.name)
		}
	}
}
