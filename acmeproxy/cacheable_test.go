package acmeproxy

import (
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
)

// A public answer that a cache may keep and hand to many clients (the
// CA chain, the CRL) carries no Replay-Nonce: a cache would give every
// client the one nonce, spent by the first to use it (RFC 8555 §6.5: a
// nonce is good for one request). The resources a signed request reads
// carry one each (TestSuccessfulResponsesCarryANonceTheIndexLinkAndNoStore).
func TestACacheableAnswerCarriesNoReplayNonce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		e.crl(func(*x509.RevocationList) bool { return true }) // published
		for _, path := range []string{"/ca.pem", "/crl"} {
			t.Run(path, func(t *testing.T) {
				r := e.plain(http.MethodGet, e.url(path))
				if r.status != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, r.status, r.body)
				}
				if cc := r.header.Get("Cache-Control"); !strings.HasPrefix(cc, "public") {
					t.Fatalf("Cache-Control %q: not a cacheable answer", cc)
				}
				if n := r.header.Get("Replay-Nonce"); n != "" {
					t.Errorf("a cacheable answer carries Replay-Nonce %q", n)
				}
				if !e.hasIndexLink(r) {
					t.Errorf("no index Link: %q", r.header.Values("Link"))
				}
			})
		}
	})
}
