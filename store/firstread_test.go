package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// firstReadScene is an account with an issued order: an order, its
// authorization and challenges, and its certificate, for the first reads.
type firstReadScene struct {
	db   *DB
	acct Account
	o    lived
}

func newFirstReadScene(t testing.TB, db *DB) firstReadScene {
	acct := newAccount(t, db, t0)
	return firstReadScene{db: db, acct: acct, o: makeOrder(t, db, acct.ID, life{at: t0, state: "valid", notAfter: t0.Add(day)})}
}

// spend spends a fresh nonce of the scene's account under ctx.
func (s firstReadScene) spend(t *testing.T, ctx context.Context) {
	t.Helper()
	acct, fresh, err := s.db.UseNonceAs(ctx, NewID(), t0.Add(time.Hour), "p", s.acct.ID)
	if err != nil || !fresh || acct.ID != s.acct.ID {
		t.Fatalf("UseNonceAs: account %q fresh=%v err=%v; want the scene's account, fresh", acct.ID, fresh, err)
	}
}

// A request that names its first read gets, from that read, what the
// read gets without it — for each of the four kinds a signed request
// reads first, and for an id that is not there.
func TestAFirstReadSentWithTheNonceReturnsWhatTheReadReturnsWithoutIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		s := newFirstReadScene(t, openTest(t))
		bg := context.Background()
		a, err := s.db.GetAuthz(bg, "p", s.o.order.AuthzIDs[0])
		if err != nil {
			t.Fatal(err)
		}
		type read func(ctx context.Context) (any, error)
		for _, tc := range []struct {
			name  string
			first *FirstRead
			read  read
		}{
			{"ok/an order", FirstReadOfOrder(s.o.order.ID), func(ctx context.Context) (any, error) { return s.db.GetOrder(ctx, "p", s.o.order.ID) }},
			{"ok/an authorization", FirstReadOfAuthz(a.ID), func(ctx context.Context) (any, error) { return s.db.GetAuthz(ctx, "p", a.ID) }},
			{"ok/a challenge", FirstReadOfChallenge(a.Challenges[1].ID), func(ctx context.Context) (any, error) {
				c, az, err := s.db.GetChallenge(ctx, "p", a.Challenges[1].ID)
				return [2]any{c, az}, err
			}},
			{"ok/a certificate", FirstReadOfCertificate(s.o.cert.ID), func(ctx context.Context) (any, error) { return s.db.GetCertificate(ctx, "p", s.o.cert.ID) }},
			{"fail/an order that is not there", FirstReadOfOrder("missing"), func(ctx context.Context) (any, error) { return s.db.GetOrder(ctx, "p", "missing") }},
			{"fail/a certificate that is not there", FirstReadOfCertificate("missing"), func(ctx context.Context) (any, error) { return s.db.GetCertificate(ctx, "p", "missing") }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				want, wantErr := tc.read(bg)
				ctx := WithFirstRead(bg, tc.first)
				s.spend(t, ctx)
				got, err := tc.read(ctx)
				if !reflect.DeepEqual(got, want) || errors.Is(err, ErrNotFound) != errors.Is(wantErr, ErrNotFound) || (err == nil) != (wantErr == nil) {
					t.Fatalf("with the first read: %+v, %v\nwithout: %+v, %v", got, err, want, wantErr)
				}
			})
		}
	})
}

// The row read with the nonce serves the request's first read of it
// only: a read after the request's own write sees the write, as does a
// read under a nonce that was refused (nothing is kept from it) and the
// read of another id.
func TestAFirstReadServesOnlyTheFirstReadOfItsIdAfterAFreshNonce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		bg := context.Background()
		for _, tc := range []struct {
			name string
			// before spends the nonce under ctx and reads what it may;
			// the authorization is then deactivated, and read again.
			before func(t *testing.T, s firstReadScene, ctx context.Context, id string)
		}{
			{"a read after the first", func(t *testing.T, s firstReadScene, ctx context.Context, id string) {
				s.spend(t, ctx)
				if a, err := s.db.GetAuthz(ctx, "p", id); err != nil || a.Status != "valid" {
					t.Fatalf("the first read: %s, %v; want the valid authorization", a.Status, err)
				}
			}},
			{"a read under a used nonce", func(t *testing.T, s firstReadScene, ctx context.Context, id string) {
				nonce := NewID()
				if _, err := s.db.UseNonce(bg, nonce, t0.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
				if _, fresh, err := s.db.UseNonceAs(ctx, nonce, t0.Add(time.Hour), "p", s.acct.ID); err != nil || fresh {
					t.Fatalf("a used nonce: fresh=%v err=%v; want it refused", fresh, err)
				}
			}},
			{"a read under a missing account", func(t *testing.T, s firstReadScene, ctx context.Context, id string) {
				if _, _, err := s.db.UseNonceAs(ctx, NewID(), t0.Add(time.Hour), "p", "missing"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("a missing account: %v; want ErrNotFound", err)
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newFirstReadScene(t, openTest(t))
				id := s.o.order.AuthzIDs[0]
				ctx := WithFirstRead(bg, FirstReadOfAuthz(id))
				tc.before(t, s, ctx, id)
				if err := s.db.DeactivateAuthz(bg, id, t0); err != nil {
					t.Fatal(err)
				}
				if a, err := s.db.GetAuthz(ctx, "p", id); err != nil || a.Status != "deactivated" {
					t.Fatalf("the read after the deactivation: %s, %v; want deactivated", a.Status, err)
				}
			})
		}
		t.Run("the read of another id", func(t *testing.T) {
			s := newFirstReadScene(t, openTest(t))
			other := makeOrder(t, s.db, s.acct.ID, life{at: t0, state: "pending"})
			ctx := WithFirstRead(bg, FirstReadOfOrder(s.o.order.ID))
			s.spend(t, ctx)
			if o, err := s.db.GetOrder(ctx, "p", other.order.ID); err != nil || o.ID != other.order.ID || o.Status != "pending" {
				t.Fatalf("the other order: %s %s, %v; want %s pending", o.ID, o.Status, err, other.order.ID)
			}
			if o, err := s.db.GetOrder(ctx, "p", s.o.order.ID); err != nil || o.ID != s.o.order.ID || o.Status != "valid" {
				t.Fatalf("the named order: %s %s, %v; want %s valid", o.ID, o.Status, err, s.o.order.ID)
			}
		})
	})
}
