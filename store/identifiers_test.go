package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

func dnsIDs(names ...string) []acme.Identifier {
	out := make([]acme.Identifier, len(names))
	for i, n := range names {
		out[i] = acme.Identifier{Type: "dns", Value: n}
	}
	return out
}

// storedIdentifiers reads an order's identifier rows in position order.
func storedIdentifiers(t *testing.T, db *DB, orderID string) []acme.Identifier {
	t.Helper()
	rows, err := db.r.Query(db.q(`SELECT type, value FROM order_identifiers WHERE order_id = ? ORDER BY position`), orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []acme.Identifier
	for rows.Next() {
		var id acme.Identifier
		if err := rows.Scan(&id.Type, &id.Value); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// positions reads a column of positions of rows of table whose parent
// column is id, in insertion order.
func positions(t *testing.T, db *DB, table, parent, id string) []int {
	t.Helper()
	rows, err := db.r.Query(db.q(`SELECT position FROM `+table+` WHERE `+parent+` = ? ORDER BY `+insertionOrder(db)), id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func orderIDs(s []OrderSummary) []string {
	var out []string
	for _, o := range s {
		out = append(out, o.ID)
	}
	return out
}

func TestOrdersAreFoundByAnyOfTheirIdentifiersExactly(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		create := func(at time.Time, names ...string) Order {
			o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: dnsIDs(names...), Expires: at.Add(time.Hour)}, nil, at)
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		both := create(t0, "c.example.com", "a.example.com", "b.example.com")
		onlyB := create(t0.Add(time.Second), "b.example.com")
		other := create(t0.Add(2*time.Second), "other.example.com")

		for _, tc := range []struct {
			name       string
			identifier string
			want       []string
		}{
			{"an identifier of one order", "a.example.com", []string{both.ID}},
			{"an identifier of two orders, newest first", "b.example.com", []string{onlyB.ID, both.ID}},
			{"the last identifier of an order", "other.example.com", []string{other.ID}},
			{"part of an identifier finds nothing", "example.com", nil},
			{"an identifier of no order", "d.example.com", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := db.ListOrders(ctx, OrderFilter{Identifier: tc.identifier})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(orderIDs(got), tc.want) {
					t.Errorf("orders %v, want %v", orderIDs(got), tc.want)
				}
			})
		}

		// The rows keep the order's own order of identifiers.
		if got := storedIdentifiers(t, db, both.ID); !slices.Equal(got, both.Identifiers) {
			t.Errorf("identifier rows %v, want %v", got, both.Identifiers)
		}
	})
}

func TestAuthorizationsAndChallengesRecordTheirPositionInCreationOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		o := newOrderWithAuthzs(t, db, 3)
		if got := positions(t, db, "authorizations", "order_id", o.ID); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("authorization positions %v, want 0, 1, 2", got)
		}
		ctx := context.Background()
		acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		a := Authz{Identifier: dnsIDs("x.example.com")[0], Expires: t0.Add(time.Hour)}
		for _, ty := range []string{"http-01", "dns-01", "tls-alpn-01"} {
			a.Challenges = append(a.Challenges, Challenge{Type: ty, Token: NewID()})
		}
		o2, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: []acme.Identifier{a.Identifier}, Expires: t0.Add(time.Hour)}, []Authz{a}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got := positions(t, db, "challenges", "authz_id", o2.AuthzIDs[0]); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("challenge positions %v, want 0, 1, 2", got)
		}
	})
}

// oldSchemaDB creates an SQLite database at path migrated up to version
// (inclusive) and no further, as an older binary left it.
func oldSchemaDB(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec(createSchemaTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range sqliteMigrations[:version] {
		for _, stmt := range m.stmts {
			if _, err := raw.Exec(stmt); err != nil {
				t.Fatalf("migration %d: %v", m.version, err)
			}
		}
		if _, err := raw.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)`, m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	return raw
}

func TestMigratingAnOldDatabaseBackfillsIdentifiersAndPositions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	raw := oldSchemaDB(t, path, 8)
	mustExec := func(stmt string, args ...any) {
		t.Helper()
		if _, err := raw.Exec(stmt, args...); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// What the binary at schema version 8 wrote for an order of three
	// names, each authorization with three challenges, and an order of
	// one IP address.
	mustExec(`INSERT INTO accounts (id, profile, key_thumbprint, key_jwk, status, created_at, updated_at) VALUES ('acct', 'p', 'th', '{}', 'valid', 0, 0)`)
	names := []string{"c.example.com", "a.example.com", "b.example.com"}
	mustExec(`INSERT INTO orders (id, profile, account_id, status, identifiers, expires_at, created_at, updated_at)
		VALUES ('order1', 'p', 'acct', 'pending', '[{"type":"dns","value":"c.example.com"},{"type":"dns","value":"a.example.com"},{"type":"dns","value":"b.example.com"}]', ?, 0, 0)`,
		t0.Add(time.Hour).UnixMilli())
	mustExec(`INSERT INTO orders (id, profile, account_id, status, identifiers, expires_at, created_at, updated_at)
		VALUES ('order2', 'p', 'acct', 'pending', '[{"type":"ip","value":"192.0.2.1"}]', ?, 1, 1)`, t0.Add(time.Hour).UnixMilli())
	// Ids that sort against creation order, so that only the positions
	// keep it.
	authzIDs := []string{"z-authz", "m-authz", "a-authz"}
	chalTypes := []string{"tls-alpn-01", "http-01", "dns-01"}
	for i, n := range names {
		mustExec(`INSERT INTO authorizations (id, order_id, account_id, identifier_type, identifier_value, status, expires_at, created_at, updated_at)
			VALUES (?, 'order1', 'acct', 'dns', ?, 'pending', ?, 0, 0)`, authzIDs[i], n, t0.Add(time.Hour).UnixMilli())
		for j, ty := range chalTypes {
			mustExec(`INSERT INTO challenges (id, authz_id, type, token, status, updated_at) VALUES (?, ?, ?, 'tok', 'pending', 0)`,
				fmt.Sprintf("%c-chal-%d", 'z'-j, i), authzIDs[i], ty)
		}
	}
	mustExec(`INSERT INTO authorizations (id, order_id, account_id, identifier_type, identifier_value, status, expires_at, created_at, updated_at)
		VALUES ('b-authz', 'order2', 'acct', 'ip', '192.0.2.1', 'pending', ?, 0, 0)`, t0.Add(time.Hour).UnixMilli())
	raw.Close()

	db, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	o, err := db.GetOrder(ctx, "p", "order1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Identifiers, dnsIDs(names...)) || !slices.Equal(o.AuthzIDs, authzIDs) || o.Status != acme.StatusPending {
		t.Errorf("order after migration: identifiers %v, authorizations %v, status %s", o.Identifiers, o.AuthzIDs, o.Status)
	}
	for _, id := range []string{"order1", "order2"} {
		g, err := db.GetOrder(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if got := storedIdentifiers(t, db, id); !slices.Equal(got, g.Identifiers) {
			t.Errorf("order %s: identifier rows %v, want %v", id, got, g.Identifiers)
		}
	}
	for _, tc := range []struct{ identifier, want string }{
		{"a.example.com", "order1"},
		{"b.example.com", "order1"},
		{"192.0.2.1", "order2"},
	} {
		got, err := db.ListOrders(ctx, OrderFilter{Identifier: tc.identifier})
		if err != nil {
			t.Fatal(err)
		}
		if ids := orderIDs(got); !slices.Equal(ids, []string{tc.want}) {
			t.Errorf("orders with %s: %v, want %s", tc.identifier, ids, tc.want)
		}
	}
	if got := positions(t, db, "authorizations", "order_id", "order1"); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("authorization positions %v, want 0, 1, 2", got)
	}
	for _, aid := range authzIDs {
		if got := positions(t, db, "challenges", "authz_id", aid); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("challenge positions of %s: %v, want 0, 1, 2", aid, got)
		}
		a, err := db.GetAuthz(ctx, "p", aid)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, c := range a.Challenges {
			types = append(types, c.Type)
		}
		if !slices.Equal(types, chalTypes) {
			t.Errorf("challenges of %s: %v, want %v", aid, types, chalTypes)
		}
	}
}
