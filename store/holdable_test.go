package store

import (
	"context"
	"errors"
	"testing"
)

// A key a client made up — an id in a path, a kid, a cursor, a token —
// that holds a NUL or bytes that are not UTF-8 is a key no row has: its
// lookup finds nothing, in both dialects, rather than failing (PostgreSQL
// refuses such text in a statement).
func TestALookupByAKeyNoRowCanHoldFindsNothing(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		lookups := []struct {
			name string
			find func(key string) error
		}{
			{"an account", func(k string) error { _, err := db.GetAccount(ctx, "p", k); return err }},
			{"an order", func(k string) error { _, err := db.GetOrder(ctx, "p", k); return err }},
			{"an authorization", func(k string) error { _, err := db.GetAuthz(ctx, "p", k); return err }},
			{"a challenge", func(k string) error { _, _, err := db.GetChallenge(ctx, "p", k); return err }},
			{"a certificate", func(k string) error { _, err := db.GetCertificate(ctx, "p", k); return err }},
			{"an EAB key", func(k string) error { _, err := db.EABKeyForBinding(ctx, "p", k); return err }},
			{"a relay http-01 token", func(k string) error { _, err := db.GetRelayHTTPToken(ctx, k, t0); return err }},
		}
		for _, key := range []struct{ name, key string }{
			{"a NUL", "\x00"}, {"a NUL inside", "a\x00b"}, {"a byte that is not UTF-8", "\xff"}, {"a broken UTF-8 sequence", "\xc3\x28"},
		} {
			for _, l := range lookups {
				t.Run(l.name+" by "+key.name, func(t *testing.T) {
					if err := l.find(key.key); !errors.Is(err, ErrNotFound) {
						t.Fatalf("got %v, want ErrNotFound", err)
					}
				})
			}
			t.Run("an account's orders after a cursor of "+key.name, func(t *testing.T) {
				if ids, err := db.AccountOrderIDs(ctx, "acct", key.key, t0, 10); err != nil || len(ids) != 0 {
					t.Fatalf("got %v, %v; want no orders and no error", ids, err)
				}
			})
		}
	})
}
