package store

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// plannerRowEstimate is what PostgreSQL's planner believes a table holds
// (pg_class.reltuples): -1 for a table never analyzed.
func plannerRowEstimate(t *testing.T, db *DB, table string) float64 {
	t.Helper()
	var n float64
	if err := db.r.QueryRowContext(context.Background(), `SELECT reltuples FROM pg_class WHERE relname = $1`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAnalyzeGivesPostgreSQLsPlannerTheRowsOfTheTables(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		acct := newAccount(t, db, t0)
		var orders []SeededOrder
		for i := range 20 {
			orders = append(orders, SeededOrder{Profile: "p", AccountID: acct.ID, Created: t0,
				Identifiers: []acme.Identifier{{Type: "dns", Value: NewID() + ".example.com"}}, Challenges: []string{"http-01"},
				Certificate: Certificate{Serial: NewID()[:16] + string(rune('a'+i)), ChainPEM: "-", PublicKey: []byte{1},
					NotBefore: t0, NotAfter: t0.Add(time.Hour)}})
		}
		if _, err := db.SeedIssued(ctx, orders); err != nil {
			t.Fatal(err)
		}
		if dialectOf(t).name != "postgres" {
			if err := db.Analyze(ctx); err != nil {
				t.Fatalf("Analyze on SQLite: %v; want nothing done", err)
			}
			var stats int
			if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'sqlite_stat1'`).Scan(&stats); err != nil || stats != 0 {
				t.Fatalf("SQLite's statistics table exists (%d, %v) after Analyze; want none gathered", stats, err)
			}
			return
		}
		if n := plannerRowEstimate(t, db, "orders"); n != -1 {
			t.Fatalf("the planner's estimate of orders before Analyze is %v; want -1 (never analyzed)", n)
		}
		if err := db.Analyze(ctx); err != nil {
			t.Fatal(err)
		}
		if n := plannerRowEstimate(t, db, "orders"); n != 20 {
			t.Errorf("the planner's estimate of orders after Analyze is %v; want the 20 seeded", n)
		}
	})
}
