package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// TestConcurrentIssuanceFlowsOfDifferentAccountsAllSucceed runs the
// store's side of many certificates at once, as eight clients of two
// instances do: each spends nonces, creates an order spending its
// account's rate limit, starts and completes its challenge, and claims
// the order for issue, on orders of its own. Nothing is contended, so
// every write must succeed: on PostgreSQL, when the store's writes were
// serializable, they conflicted on the shared index pages of small
// tables (the benchmark's 500s on finalize and challenge POSTs); at READ
// COMMITTED they must neither conflict nor wait for each other in a
// circle, and a write that loses a race anyway must be run again until
// it wins, not answered with an error.
func TestConcurrentIssuanceFlowsOfDifferentAccountsAllSucceed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const (
			clients = 8
			flows   = 25 // per client
		)
		ctx := context.Background()
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)} // two instances
		var wg sync.WaitGroup
		errs := make(chan error, clients*flows)
		for c := range clients {
			db := dbs[c%len(dbs)]
			wg.Go(func() {
				acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
				if err != nil {
					errs <- fmt.Errorf("client %d: account: %w", c, err)
					return
				}
				for i := range flows {
					if err := issuanceFlow(ctx, db, acct.ID, fmt.Sprintf("c%d-%d.example.com", c, i)); err != nil {
						errs <- fmt.Errorf("client %d, flow %d: %w", c, i, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		n := 0
		for err := range errs {
			if n++; n <= 5 {
				t.Error(err)
			}
		}
		if n > 0 {
			t.Errorf("%d of %d flows failed", n, clients*flows)
		}
	})
}

// issuanceFlow is the store's writes for one certificate up to the
// finalize claim, each checked for the result it must have.
func issuanceFlow(ctx context.Context, db *DB, accountID, name string) error {
	nonceExpiry := t0.Add(time.Hour)
	spendNonce := func() error {
		fresh, err := db.UseNonce(ctx, NewID(), nonceExpiry)
		if err == nil && !fresh {
			err = fmt.Errorf("a fresh nonce was refused as used")
		}
		return err
	}
	if err := spendNonce(); err != nil {
		return fmt.Errorf("new-order nonce: %w", err)
	}
	id := acme.Identifier{Type: "dns", Value: name}
	spend := LimitSpend{Key: "orders:" + accountID, Emission: time.Millisecond, Burst: 1000, Cost: 1}
	o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: accountID, Identifiers: []acme.Identifier{id}, Expires: t0.Add(time.Hour)},
		[]Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, t0, spend)
	if err != nil {
		return fmt.Errorf("new-order: %w", err)
	}
	a, err := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
	if err != nil {
		return fmt.Errorf("authorization: %w", err)
	}
	if err := spendNonce(); err != nil {
		return fmt.Errorf("challenge nonce: %w", err)
	}
	if ok, err := db.StartChallenge(ctx, a.Challenges[0].ID, t0); err != nil || !ok {
		return fmt.Errorf("starting the challenge: %v, %w", ok, err)
	}
	res, err := db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, t0)
	if err != nil {
		return fmt.Errorf("completing the challenge: %w", err)
	}
	if res.OrderStatus != acme.StatusReady {
		return fmt.Errorf("the order is %s after its only challenge, want ready", res.OrderStatus)
	}
	if err := spendNonce(); err != nil {
		return fmt.Errorf("finalize nonce: %w", err)
	}
	if ok, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), OrderClient{}, "", t0); err != nil || !ok {
		return fmt.Errorf("claiming the order: %v, %w", ok, err)
	}
	return nil
}
