package acmeproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

func TestANonceSpelledWithNonZeroSpareBitsIsRefused(t *testing.T) {
	e := newTestEnv(t, nil)
	now := time.Now()
	n := e.srv.nonces.mint(e.srv.Profile(), now)
	// 32 bytes are 43 base64url characters; the last carries 2 spare bits.
	// Another spelling of the same bytes must not count as another nonce.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, n[len(n)-1])
	other := n[:len(n)-1] + string(alphabet[last|1])
	if other == n {
		other = n[:len(n)-1] + string(alphabet[last|2])
	}
	err := e.srv.nonces.consume(context.Background(), e.srv.Profile(), other, now)
	if p, ok := problem.As(err); !ok || p.Type != acme.ErrorBadNonce {
		t.Fatalf("respelled nonce: %v, want badNonce", err)
	}
	if err := e.srv.nonces.consume(context.Background(), e.srv.Profile(), n, now); err != nil {
		t.Fatalf("the nonce itself: %v", err)
	}
}
