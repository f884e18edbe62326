package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// TestTheRetentionSweepAndTheResumeSweepReadOnlyTheRowsTheyTake runs the
// background sweeps that look for their rows among every order — the
// retention sweep (expired certificates, unfinished orders, deactivated
// accounts), the resume sweep's reclaim of stuck orders, the nonce and
// settled jobs prunes —
// and asks SQLite for the plan of every statement they run: each must
// find its rows by an index that holds only candidates (a status, an
// expiry), never read every order of a profile or every order there is.
// They run every minute or so, whatever the database's size; the orders
// are kept few-indexed for issuance's sake (an index per status and
// profile would be rewritten on every status change), so this is what
// says the indexes left still serve them.
func TestTheRetentionSweepAndTheResumeSweepReadOnlyTheRowsTheyTake(t *testing.T) {
	ctx := context.Background()
	db, ran := openRecording(t)
	t0 := time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)
	if err := db.SeedAccounts(ctx, []store.Account{{ID: "acct", Profile: "p", Thumbprint: "t", KeyJWK: []byte(`{}`)}}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SeedIssued(ctx, []store.SeededOrder{{Profile: "p", AccountID: "acct",
		Identifiers: []acme.Identifier{{Type: acme.IdentifierDNS, Value: "a.example.com"}}, Challenges: []string{acme.ChallengeHTTP01},
		Created: t0, Certificate: store.Certificate{Serial: "5e", ChainPEM: "-", PublicKey: []byte{1}, NotBefore: t0, NotAfter: t0.Add(day)}}}); err != nil {
		t.Fatal(err)
	}
	o, err := db.CreateOrder(ctx, store.Order{Profile: "p", AccountID: "acct", Expires: t0.Add(day),
		Identifiers: []acme.Identifier{{Type: acme.IdentifierDNS, Value: "b.example.com"}}}, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.FailOrder(ctx, o.ID, nil, "", t0); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(400 * day)
	if _, err := db.ReclaimStuckOrders(ctx, "p", later.Add(-time.Minute), later, 10, "signer_issue", ""); err != nil {
		t.Fatal(err)
	}
	pruned, err := db.PruneRetention(ctx, store.Retention{OrdersBefore: later, CertificatesBefore: later, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	if pruned.Orders != 2 {
		t.Fatalf("the sweep pruned %d orders, want both (the expired certificate's and the failed one)", pruned.Orders)
	}
	if _, err := db.PruneNonces(ctx, later); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PruneJobs(ctx, later); err != nil {
		t.Fatal(err)
	}

	stmts := ran()
	explained := 0
	for _, stmt := range stmts {
		line := oneLine(stmt)
		if store.IsMigrationStatement(stmt) || strings.HasPrefix(line, "INSERT INTO") || strings.Contains(line, "FROM secrets") {
			continue // the seeding, the order's creation
		}
		plan, ok, err := store.QueryPlan(ctx, db, stmt)
		if err != nil {
			t.Fatalf("EXPLAIN QUERY PLAN %s: %v", stmt, err)
		}
		if !ok {
			continue
		}
		explained++
		for _, step := range plan {
			if table, all := everyRowOf(step, nil); all {
				t.Errorf("reads every row of %s (%s):\n%s\nplan: %s", table, step, line, strings.Join(plan, "; "))
			}
		}
		// Invalid orders stay until they are pruned: the sweep must
		// bound what it reads of them by their expiry, not read every
		// unfinished order through their status.
		if strings.Contains(line, "o.expires_at < ?") && !slices.ContainsFunc(plan, func(step string) bool {
			return strings.Contains(step, "INDEX orders_expiry (status=? AND expires_at<?)")
		}) {
			t.Errorf("finds unfinished orders without their expiry's index:\n%s\nplan: %s", line, strings.Join(plan, "; "))
		}
	}
	if explained < 8 {
		t.Errorf("explained %d statements of the sweeps; want every one they ran (at least 8): %q", explained, stmts)
	}
}
