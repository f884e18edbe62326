package store

import (
	"context"
	"errors"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
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

// The same for what an operator types (the web page, the admin API): an
// order's or an account's id in a path, a list's filter or cursor that
// holds a NUL or bytes that are not UTF-8 finds nothing, in both dialects,
// rather than failing — on PostgreSQL it was a 500 and an error in the log
// for a mistyped search.
func TestAnOperatorsLookupOrSearchByTextNoRowCanHoldFindsNothing(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		lookups := []struct {
			name string
			find func(key string) error
		}{
			{"an order by id", func(k string) error { _, err := db.OrderByID(ctx, k); return err }},
			{"an account by id", func(k string) error { _, err := db.AccountByID(ctx, k); return err }},
			{"an EAB key's profile by its kid", func(k string) error { _, err := db.EABKeyProfile(ctx, k); return err }},
			{"an EAB key revoked by its kid", func(k string) error { _, err := db.RevokeEABKey(ctx, "p", k, t0); return err }},
			{"an EAB key revoked under a profile", func(k string) error { _, err := db.RevokeEABKey(ctx, k, "kid", t0); return err }},
		}
		lists := []struct {
			name string
			list func(v string) (int, error)
		}{
			{"orders by profile", func(v string) (int, error) { r, err := db.ListOrders(ctx, OrderFilter{Profile: v}); return len(r), err }},
			{"orders by status", func(v string) (int, error) {
				r, err := db.ListOrders(ctx, OrderFilter{Status: acme.Status(v)})
				return len(r), err
			}},
			{"orders by account", func(v string) (int, error) {
				r, err := db.ListOrders(ctx, OrderFilter{AccountID: v})
				return len(r), err
			}},
			{"orders by identifier", func(v string) (int, error) {
				r, err := db.ListOrders(ctx, OrderFilter{Identifier: v})
				return len(r), err
			}},
			{"orders by serial", func(v string) (int, error) { r, err := db.ListOrders(ctx, OrderFilter{Serial: v}); return len(r), err }},
			{"orders after a cursor", func(v string) (int, error) { r, err := db.ListOrders(ctx, OrderFilter{After: v}); return len(r), err }},
			{"accounts by profile", func(v string) (int, error) {
				r, err := db.ListAccounts(ctx, AccountFilter{Profile: v})
				return len(r), err
			}},
			{"accounts by status", func(v string) (int, error) {
				r, err := db.ListAccounts(ctx, AccountFilter{Status: acme.Status(v)})
				return len(r), err
			}},
			{"accounts after a cursor", func(v string) (int, error) {
				r, err := db.ListAccounts(ctx, AccountFilter{After: v})
				return len(r), err
			}},
			{"jobs by kind", func(v string) (int, error) { r, err := db.ListJobs(ctx, JobFilter{Kind: v}); return len(r), err }},
			{"jobs by status", func(v string) (int, error) {
				r, err := db.ListJobs(ctx, JobFilter{Status: JobStatus(v)})
				return len(r), err
			}},
			{"jobs by key", func(v string) (int, error) { r, err := db.ListJobs(ctx, JobFilter{Key: v}); return len(r), err }},
			{"audit rows by profile", func(v string) (int, error) {
				r, err := db.SearchAudit(ctx, AuditFilter{Profile: v})
				return len(r), err
			}},
			{"audit rows by event", func(v string) (int, error) { r, err := db.SearchAudit(ctx, AuditFilter{Event: v}); return len(r), err }},
			{"audit rows by outcome", func(v string) (int, error) {
				r, err := db.SearchAudit(ctx, AuditFilter{Outcome: v})
				return len(r), err
			}},
			{"audit rows by order", func(v string) (int, error) {
				r, err := db.SearchAudit(ctx, AuditFilter{OrderID: v})
				return len(r), err
			}},
			{"audit rows by account", func(v string) (int, error) {
				r, err := db.SearchAudit(ctx, AuditFilter{AccountID: v})
				return len(r), err
			}},
			{"audit rows by serial", func(v string) (int, error) { r, err := db.SearchAudit(ctx, AuditFilter{Serial: v}); return len(r), err }},
			{"EAB keys by profile", func(v string) (int, error) {
				r, err := db.ListEABKeys(ctx, EABKeyFilter{Profile: v})
				return len(r), err
			}},
			{"EAB keys after a cursor", func(v string) (int, error) {
				r, err := db.ListEABKeys(ctx, EABKeyFilter{Profile: "p", After: v})
				return len(r), err
			}},
		}
		for _, key := range []struct{ name, key string }{
			{"a NUL", "\x00"}, {"a NUL inside", "a\x00b"}, {"a byte that is not UTF-8", "\xff"}, {"a broken UTF-8 sequence", "\xc3\x28"},
		} {
			for _, l := range lookups {
				t.Run(l.name+" of "+key.name, func(t *testing.T) {
					if err := l.find(key.key); !errors.Is(err, ErrNotFound) {
						t.Fatalf("got %v, want ErrNotFound", err)
					}
				})
			}
			for _, l := range lists {
				t.Run(l.name+" of "+key.name, func(t *testing.T) {
					if n, err := l.list(key.key); err != nil || n != 0 {
						t.Fatalf("got %d rows, %v; want none and no error", n, err)
					}
				})
			}
		}
	})
}
