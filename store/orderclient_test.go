package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readyOrder returns an order of one authorization made ready.
func readyOrder(t *testing.T, db *DB) Order {
	t.Helper()
	o := newOrderWithAuthzs(t, db, 1)
	if _, err := rawW(db).Exec(`UPDATE orders SET status = 'ready' WHERE id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestClaimingAnOrderForIssueRecordsItsClientClippedAndReturnsItWithTheOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := readyOrder(t, db)
		if got, err := db.GetOrder(ctx, "p", o.ID); err != nil || got.Client != (OrderClient{}) {
			t.Fatalf("before the claim: client %+v, %v; want none", got.Client, err)
		}
		longUA := strings.Repeat("u", 1000)
		first := OrderClient{Addr: "192.0.2.7", UserAgent: longUA}
		if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), first, "", t0); err != nil || !won {
			t.Fatalf("claim: %v %v", won, err)
		}
		// A losing claim changes nothing.
		if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("other"), OrderClient{Addr: "198.51.100.1", UserAgent: "late"}, "", t0); err != nil || won {
			t.Fatalf("second claim: %v %v; want lost", won, err)
		}
		want := OrderClient{Addr: "192.0.2.7", UserAgent: Clip(longUA, AuditFieldMax)}
		if len(want.UserAgent) > AuditFieldMax {
			t.Fatalf("Clip left %d bytes", len(want.UserAgent))
		}

		got, err := db.GetOrder(ctx, "p", o.ID)
		if err != nil {
			t.Fatal(err)
		}
		summary, err := db.OrderByID(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		listed, err := db.ListOrders(ctx, OrderFilter{Profile: "p"})
		if err != nil || len(listed) != 1 {
			t.Fatalf("list: %v %v", listed, err)
		}
		stuck, err := db.ReclaimStuckOrders(ctx, "p", t0.Add(time.Minute), t0.Add(time.Minute), 10, "signer_issue", "")
		if err != nil || len(stuck) != 1 {
			t.Fatalf("reclaim: %v %v", stuck, err)
		}
		for _, tc := range []struct {
			name string
			got  OrderClient
		}{
			{"GetOrder", got.Client},
			{"OrderByID", summary.Client},
			{"ListOrders", listed[0].Client},
			{"ReclaimStuckOrders", stuck[0].Client},
		} {
			if tc.got != want {
				t.Errorf("%s: client %q / %d-byte user agent; want %q / %d bytes", tc.name, tc.got.Addr, len(tc.got.UserAgent), want.Addr, len(want.UserAgent))
			}
		}
	})
}

func TestMigratingAnOldDatabaseGivesARelayedOrderItsClient(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	raw := oldSchemaDB(t, path, 10)
	for _, stmt := range []string{
		`INSERT INTO accounts (id, profile, key_thumbprint, key_jwk, status, created_at, updated_at) VALUES ('acct', 'p', 'th', '{}', 'valid', 0, 0)`,
		`INSERT INTO orders (id, profile, account_id, status, identifiers, expires_at, created_at, updated_at)
			VALUES ('relayed', 'p', 'acct', 'processing', '[{"type":"dns","value":"r.example.com"}]', 1, 0, 0)`,
		`INSERT INTO orders (id, profile, account_id, status, identifiers, expires_at, created_at, updated_at)
			VALUES ('local', 'p', 'acct', 'processing', '[{"type":"dns","value":"l.example.com"}]', 1, 0, 0)`,
		`INSERT INTO relay_orders (order_id, profile, csr, client_addr, user_agent, status, created_at, updated_at)
			VALUES ('relayed', 'p', x'01', '10.0.0.7', 'lego/4', 'processing', 0, 0)`,
	} {
		if _, err := raw.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	raw.Close()
	db, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, want := range map[string]OrderClient{
		"relayed": {Addr: "10.0.0.7", UserAgent: "lego/4"},
		"local":   {},
	} {
		o, err := db.GetOrder(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if o.Client != want {
			t.Errorf("order %s: client %+v, want %+v", id, o.Client, want)
		}
	}
}
