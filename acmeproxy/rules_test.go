package acmeproxy

import (
	"context"
	"errors"
	"net/http"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// on returns c's account as seen through another environment on the same
// store (another instance, or the same service after a reload).
func (c *rawClient) on(t *testing.T, e *testEnv) *rawClient {
	return &rawClient{t: t, e: e, key: c.key, kid: e.url("/account/" + path.Base(c.kid))}
}

// An operator who narrows a profile's policy expects it to hold for
// orders already authorized: finalize applies the policy as it stands
// (RFC 8555 §7.4 lets the server refuse at finalize), so a name denied
// since the order was made is refused with rejectedIdentifier, with a
// subproblem naming it — one for each such name (RFC 8555 §6.7.1), as
// newOrder gives — and nothing is issued.
func TestFinalizeRefusesANameThePolicyNoLongerAllows(t *testing.T) {
	tests := []struct {
		name    string
		names   []string
		reload  func(*ProfileConfig)
		refused []string // the subproblems' names, in the order's order
	}{
		{"fail/denied since the order", []string{"keep.example.com", "later.example.com"}, func(c *ProfileConfig) {
			c.Deny = &IdentifierPolicy{Domains: []string{"later.example.com"}}
		}, []string{"later.example.com"}},
		{"fail/under a suffix denied since the order", []string{"later.example.com"}, func(c *ProfileConfig) {
			c.Deny = &IdentifierPolicy{Domains: []string{"*.example.com"}}
		}, []string{"later.example.com"}},
		{"fail/no longer in the allow list", []string{"keep.example.com", "later.example.com"}, func(c *ProfileConfig) {
			c.Allow = &IdentifierPolicy{Domains: []string{"keep.example.com"}}
		}, []string{"later.example.com"}},
		{"fail/every name denied since the order, a subproblem each", []string{"first.example.com", "later.example.com"}, func(c *ProfileConfig) {
			c.Deny = &IdentifierPolicy{Domains: []string{"*.example.com"}}
		}, []string{"first.example.com", "later.example.com"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dbPath := filepath.Join(t.TempDir(), "acme.db")
			before := newTestEnvWith(t, envOptions{dbPath: dbPath})
			alice := before.rawClient()
			alice.t = t
			alice.register()
			o := alice.readyOrder(tc.names...)
			id := path.Base(o.url)

			// The reload: the same profile on the same store, served by a
			// server built from the new configuration.
			after := newTestEnvWith(t, envOptions{dbPath: dbPath, ca: before.ca, mutate: tc.reload})
			aliceAfter := alice.on(t, after)
			r := aliceAfter.post(after.url("/order/"+id+"/finalize"),
				map[string]string{"csr": b64(newCSR(t, newKey(t), "", tc.names, nil))}, jwsOpts{})
			wantProblem(t, r, http.StatusBadRequest, acme.ErrorRejectedIdentifier)
			if len(r.problem.Subproblems) != len(tc.refused) {
				t.Fatalf("subproblems %+v, want one for each of %v", r.problem.Subproblems, tc.refused)
			}
			for i, name := range tc.refused {
				if sub := r.problem.Subproblems[i]; sub.Type != acme.ErrorRejectedIdentifier || sub.Identifier == nil ||
					*sub.Identifier != (acme.Identifier{Type: acme.IdentifierDNS, Value: name}) {
					t.Errorf("subproblem %+v, want rejectedIdentifier for dns %s", sub, name)
				}
			}

			if _, err := after.db.CertificateOfOrder(ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a certificate was stored for the refused order (err %v)", err)
			}
			read := decodeAs[orderJSON](t, aliceAfter.read(after.url("/order/"+id)))
			if read.Status == "valid" || read.Status == "processing" || read.Certificate != "" {
				t.Fatalf("the refused order reads %s with certificate %q", read.Status, read.Certificate)
			}
		})
	}
}

// expiryEnv is an environment whose server reads a fake clock.
func expiryEnv(t *testing.T) (*testEnv, *clocktest.Fake) {
	clk := clocktest.New(time.Now())
	e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = clk }})
	return e, clk
}

// RFC 8555 §7.1.3, §7.1.6: an order not finalized before it expires is
// invalid — so it reads, whatever its row last said — and a finalize is
// answered orderNotReady (§7.4): nothing is issued for it.
func TestAnOrderPastItsExpiryReadsInvalidAndCannotBeFinalized(t *testing.T) {
	ctx := context.Background()
	e, clk := expiryEnv(t)
	alice := e.rawClient()
	alice.register()
	o := alice.readyOrder("late.example.com")
	expires, err := time.Parse(time.RFC3339, o.Expires)
	if err != nil {
		t.Fatalf("order expires %q: %v", o.Expires, err)
	}
	clk.Set(expires.Add(time.Second))

	if got := decodeAs[orderJSON](t, alice.read(o.url)); got.Status != "invalid" {
		t.Fatalf("an order past its expiry reads %q, want invalid", got.Status)
	}
	// RFC 8555 §7.4: a finalize of an order that is not ready "MUST"
	// get orderNotReady, whatever its CSR: a client told its CSR is bad
	// would fix the wrong thing.
	for _, csr := range []struct {
		name  string
		names []string
	}{
		{"a CSR for the order's name", []string{"late.example.com"}},
		{"a CSR for another name", []string{"other.example.com"}},
	} {
		r := alice.finalize(o, newCSR(t, newKey(t), "", csr.names, nil))
		if r.status != http.StatusForbidden || r.problem == nil || r.problem.Type != acme.ErrorOrderNotReady {
			t.Fatalf("finalize with %s: got %d %s, want 403 orderNotReady", csr.name, r.status, r.body)
		}
	}
	if _, err := e.db.CertificateOfOrder(ctx, path.Base(o.url)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a certificate was stored for an expired order (err %v)", err)
	}
	if got := decodeAs[orderJSON](t, alice.read(o.url)); got.Status != "invalid" || got.Certificate != "" {
		t.Fatalf("after the refused finalize the order reads %s with certificate %q", got.Status, got.Certificate)
	}
}

// RFC 8555 §7.1.6: a pending authorization that reaches its expiry is
// expired. Its challenges can no longer be answered — not even with the
// right answer — and a validation job still owed to one settles it
// invalid instead of validating.
func TestAnAuthorizationPastItsExpiryIsExpiredAndItsChallengeCannotBeAnswered(t *testing.T) {
	ctx := context.Background()
	e, clk := expiryEnv(t)
	alice := e.rawClient()
	alice.register()

	// expiredChallenge is a pending http-01 challenge whose answer is
	// served, of an authorization the clock has just moved past.
	expiredChallenge := func(t *testing.T, name string, before func(challengeJSON)) (authzURL string, ch challengeJSON) {
		authzURL = alice.order(dnsID(name)).Authorizations[0]
		a := alice.authz(authzURL)
		ch = challengeOf(t, a, acme.ChallengeHTTP01)
		e.http01.set(ch.Token, alice.keyAuthorization(ch.Token))
		if before != nil {
			before(ch)
		}
		expires, err := time.Parse(time.RFC3339, a.Expires)
		if err != nil {
			t.Fatalf("authorization expires %q: %v", a.Expires, err)
		}
		clk.Set(expires.Add(time.Second))
		return authzURL, ch
	}
	challengeID := func(ch challengeJSON) string { return path.Base(ch.URL) }

	t.Run("fail/the challenge POST is refused and the authorization reads expired", func(t *testing.T) {
		alice.t = t
		authzURL, ch := expiredChallenge(t, "expired.example.com", nil)
		if got := alice.authz(authzURL); got.Status != "expired" {
			t.Fatalf("an authorization past its expiry reads %q, want expired", got.Status)
		}
		wantProblem(t, alice.post(ch.URL, map[string]any{}, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
		got, _, err := e.db.GetChallenge(ctx, e.srv.Profile(), challengeID(ch))
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "pending" {
			t.Fatalf("the challenge of an expired authorization is %s, want it left pending", got.Status)
		}
		if a := alice.authz(authzURL); a.Status != "expired" {
			t.Fatalf("after the refused answer the authorization reads %q, want expired", a.Status)
		}
	})

	t.Run("fail/a validation job owed to it settles it invalid, unvalidated", func(t *testing.T) {
		alice.t = t
		// The client answered in time; the job carrying the validation
		// runs only after the authorization expired.
		authzURL, ch := expiredChallenge(t, "job.example.com", func(ch challengeJSON) {
			if started, err := e.db.StartChallenge(ctx, challengeID(ch), clk.Now()); err != nil || !started {
				t.Fatalf("start challenge: %v %v", started, err)
			}
		})
		e.srv.Authority().RunValidation(ctx, challengeID(ch), authority.Client{})
		got, _, err := e.db.GetChallenge(ctx, e.srv.Profile(), challengeID(ch))
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "invalid" {
			t.Fatalf("a challenge validated after its authorization expired is %s, want invalid", got.Status)
		}
		if a := alice.authz(authzURL); a.Status == "valid" {
			t.Fatalf("the expired authorization became valid")
		}
	})
}
