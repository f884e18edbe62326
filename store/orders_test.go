package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func newOrderWithAuthzs(t *testing.T, db *DB, n int) Order {
	t.Helper()
	ctx := context.Background()
	acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	var authzs []Authz
	var idents []Identifier
	for i := 0; i < n; i++ {
		id := Identifier{Type: "dns", Value: string(rune('a'+i)) + ".example.com"}
		idents = append(idents, id)
		authzs = append(authzs, Authz{Identifier: id, Expires: t0.Add(time.Hour),
			Challenges: []Challenge{{Type: "http-01", Token: NewID()}}})
	}
	o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: idents, Expires: t0.Add(time.Hour)}, authzs, t0)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func challengeOf(t *testing.T, db *DB, authzID string) Challenge {
	t.Helper()
	a, err := db.GetAuthz(context.Background(), "p", authzID)
	if err != nil {
		t.Fatal(err)
	}
	return a.Challenges[0]
}

func TestConcurrentValidationOfTheLastTwoAuthorizationsMakesTheOrderReadyOnce(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		db := openTest(t)
		o := newOrderWithAuthzs(t, db, 2)
		var chals []Challenge
		for _, aid := range o.AuthzIDs {
			c := challengeOf(t, db, aid)
			if ok, err := db.StartChallenge(ctx, c.ID, t0); err != nil || !ok {
				t.Fatalf("start: %v %v", ok, err)
			}
			chals = append(chals, c)
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			changed int
		)
		for _, c := range chals {
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				res, err := db.CompleteChallenge(ctx, id, true, nil, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if res.OrderChanged {
					mu.Lock()
					changed++
					mu.Unlock()
				}
			}(c.ID)
		}
		wg.Wait()
		if changed != 1 {
			t.Fatalf("round %d: the order was promoted %d times, want once", round, changed)
		}
		got, _ := db.GetOrder(ctx, "p", o.ID)
		if got.Status != "ready" {
			t.Fatalf("round %d: order is %s, want ready", round, got.Status)
		}
	}
}

func TestAFailedChallengeInvalidatesItsAuthorizationAndOrder(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	o := newOrderWithAuthzs(t, db, 2)
	c := challengeOf(t, db, o.AuthzIDs[0])
	db.StartChallenge(ctx, c.ID, t0)
	res, err := db.CompleteChallenge(ctx, c.ID, false, []byte(`{"type":"x"}`), t0)
	if err != nil || res.OrderStatus != "invalid" || !res.OrderChanged {
		t.Fatalf("complete: %+v %v", res, err)
	}
	if _, err := db.CompleteChallenge(ctx, c.ID, true, nil, t0); !errors.Is(err, ErrWrongState) {
		t.Fatalf("completing twice: %v, want ErrWrongState", err)
	}
	a, _ := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
	if a.Status != "invalid" || string(a.Challenges[0].Error) != `{"type":"x"}` {
		t.Fatalf("authz after failure: %+v", a)
	}
}

func TestOnlyOneOfTwoConcurrentFinalizeClaimsWins(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	o := newOrderWithAuthzs(t, db, 1)
	c := challengeOf(t, db, o.AuthzIDs[0])
	db.StartChallenge(ctx, c.ID, t0)
	db.CompleteChallenge(ctx, c.ID, true, nil, t0)
	var wg sync.WaitGroup
	wins := make(chan bool, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), t0)
			if err != nil {
				t.Error(err)
			}
			wins <- won
		}()
	}
	wg.Wait()
	close(wins)
	n := 0
	for w := range wins {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d finalize claims won, want 1", n)
	}
}

func TestAnExpiredOrderCannotBeClaimedForIssue(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	o := newOrderWithAuthzs(t, db, 1)
	c := challengeOf(t, db, o.AuthzIDs[0])
	db.StartChallenge(ctx, c.ID, t0)
	db.CompleteChallenge(ctx, c.ID, true, nil, t0)
	if won, err := db.ClaimOrderForIssue(ctx, o.ID, nil, t0.Add(2*time.Hour)); err != nil || won {
		t.Fatalf("claim after expiry: won=%v err=%v", won, err)
	}
}

func TestAccountsAreUniquePerProfileAndKey(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	a1, created, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "k", KeyJWK: []byte(`{}`)}, t0)
	if err != nil || !created {
		t.Fatal(err)
	}
	a2, created, _ := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "k", KeyJWK: []byte(`{}`)}, t0)
	if created || a2.ID != a1.ID {
		t.Fatalf("same key twice made a new account")
	}
	a3, created, _ := db.CreateAccount(ctx, Account{Profile: "q", Thumbprint: "k", KeyJWK: []byte(`{}`)}, t0)
	if !created || a3.ID == a1.ID {
		t.Fatalf("the same key in another profile must be another account")
	}
	if _, err := db.GetAccount(ctx, "q", a1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("account of profile p visible in profile q: %v", err)
	}
}

func TestANonceCanBeUsedOnce(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	if fresh, err := db.UseNonce(ctx, "n1", t0.Add(time.Hour)); err != nil || !fresh {
		t.Fatalf("first use: %v %v", fresh, err)
	}
	if fresh, err := db.UseNonce(ctx, "n1", t0.Add(time.Hour)); err != nil || fresh {
		t.Fatalf("second use: fresh=%v err=%v; want refused", fresh, err)
	}
	if n, err := db.PruneNonces(ctx, t0.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
}

func TestResourceIDsNeverLookLikeCommandLineFlags(t *testing.T) {
	for i := 0; i < 2000; i++ {
		id := NewID()
		if strings.HasPrefix(id, "-") || strings.ContainsAny(id, "/?#") || len(id) < 26 {
			t.Fatalf("id %q could be taken for a flag or break a URL", id)
		}
	}
}

func TestReadingAnOrderOrAuthorizationReturnsItsPartsInCreationOrder(t *testing.T) {
	ctx := context.Background()
	db := openTest(t)
	acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	types := []string{"http-01", "dns-01", "tls-alpn-01"}
	var authzs []Authz
	var idents []Identifier
	for _, name := range []string{"c.example.com", "a.example.com", "b.example.com"} {
		id := Identifier{Type: "dns", Value: name}
		idents = append(idents, id)
		a := Authz{Identifier: id, Expires: t0.Add(time.Hour)}
		for _, ty := range types {
			a.Challenges = append(a.Challenges, Challenge{Type: ty, Token: NewID()})
		}
		authzs = append(authzs, a)
	}
	created, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: idents, Expires: t0.Add(time.Hour)}, authzs, t0)
	if err != nil {
		t.Fatal(err)
	}

	o, err := db.GetOrder(ctx, "p", created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.AuthzIDs, ",") != strings.Join(created.AuthzIDs, ",") {
		t.Errorf("authorizations %v, want %v (creation order)", o.AuthzIDs, created.AuthzIDs)
	}
	for i, id := range o.AuthzIDs {
		a, err := db.GetAuthz(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if a.Identifier != idents[i] || a.OrderID != o.ID || a.AccountID != acct.ID || !a.Expires.Equal(t0.Add(time.Hour)) {
			t.Errorf("authorization %d: %+v", i, a)
		}
		var got []string
		for _, c := range a.Challenges {
			got = append(got, c.Type)
			if c.AuthzID != id || c.Status != "pending" || c.Token == "" {
				t.Errorf("challenge %+v of authorization %s", c, id)
			}
		}
		if strings.Join(got, ",") != strings.Join(types, ",") {
			t.Errorf("challenges %v, want %v", got, types)
		}
	}

	for _, tc := range []struct {
		name string
		read func() error
	}{
		{"an unknown order", func() error { _, err := db.GetOrder(ctx, "p", "nope"); return err }},
		{"an order of another profile", func() error { _, err := db.GetOrder(ctx, "q", created.ID); return err }},
		{"an unknown authorization", func() error { _, err := db.GetAuthz(ctx, "p", "nope"); return err }},
		{"an authorization of another profile", func() error { _, err := db.GetAuthz(ctx, "q", o.AuthzIDs[0]); return err }},
	} {
		if err := tc.read(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", tc.name, err)
		}
	}
}
