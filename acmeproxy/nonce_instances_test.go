package acmeproxy

import (
	"net/http"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// Instances sharing a store share its nonces (issue 14): a nonce one
// instance minted is accepted by another, and once spent there it is
// spent everywhere — a replay at the instance that minted it, or at the
// one that took it, is a badNonce.
func TestANonceMintedByOneInstanceIsAcceptedOnceByAnyInstance(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		place := newPlace(t)
		a := newTestEnvWith(t, envOptions{dbPath: place})
		b := newTestEnvWith(t, envOptions{dbPath: place, ca: a.ca})
		alice := a.rawClient()
		alice.register()
		on := map[string]*rawClient{"a": alice, "b": alice.on(t, b)}
		for _, tc := range []struct {
			name                string
			mint, use, replayAt string
		}{
			{"minted at a, spent at b, replayed at a", "a", "b", "a"},
			{"minted at a, spent at b, replayed at b", "a", "b", "b"},
			{"minted at b, spent at a, replayed at b", "b", "a", "b"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				n := on[tc.mint].nonce()
				if n == "" {
					t.Fatalf("instance %s gave no Replay-Nonce", tc.mint)
				}
				user, replayer := on[tc.use], on[tc.replayAt]
				if r := user.post(user.kid, nil, jwsOpts{nonce: &n}); r.status != http.StatusOK {
					t.Fatalf("first use at %s of a nonce minted at %s: %d %s", tc.use, tc.mint, r.status, r.body)
				}
				wantProblem(t, replayer.post(replayer.kid, nil, jwsOpts{nonce: &n}), http.StatusBadRequest, acme.ErrorBadNonce)
			})
		}
	})
}
