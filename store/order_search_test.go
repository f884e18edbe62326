package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// seedSearchable stores 30 issued orders, oldest first, order i for name
// n<i%10>.example.com, the even ones of account "acct-a", the odd ones of
// "acct-b", and returns them.
func seedSearchable(t *testing.T, db *DB) []Order {
	t.Helper()
	ctx := context.Background()
	if err := db.SeedAccounts(ctx, []Account{{ID: "acct-a", Profile: "p", Thumbprint: "ta", KeyJWK: []byte(`{}`)},
		{ID: "acct-b", Profile: "p", Thumbprint: "tb", KeyJWK: []byte(`{}`)}}, t0); err != nil {
		t.Fatal(err)
	}
	var seeds []SeededOrder
	for i := range 30 {
		acct := "acct-a"
		if i%2 == 1 {
			acct = "acct-b"
		}
		seeds = append(seeds, SeededOrder{Profile: "p", AccountID: acct,
			Identifiers: []acme.Identifier{{Type: "dns", Value: fmt.Sprintf("n%d.example.com", i%10)}},
			Challenges:  []string{"http-01", "dns-01"}, Created: t0.Add(time.Duration(i) * time.Minute),
			Certificate: Certificate{Serial: fmt.Sprintf("5e%02d", i), ChainPEM: "-", PublicKey: []byte{1},
				NotBefore: t0, NotAfter: t0.Add(24 * time.Hour)}})
	}
	orders, err := db.SeedIssued(ctx, seeds)
	if err != nil {
		t.Fatal(err)
	}
	return orders
}

func TestTheOrderSearchFindsOrdersByIdentifierAccountAndSerialNewestFirst(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		orders := seedSearchable(t, db)
		idx := map[string]int{}
		for i, o := range orders {
			idx[o.ID] = i
		}
		cases := []struct {
			name string
			f    OrderFilter
			want []int
		}{
			{"ok/by identifier, every order of the name", OrderFilter{Identifier: "n3.example.com"}, []int{23, 13, 3}},
			{"ok/by identifier and account", OrderFilter{Identifier: "n4.example.com", AccountID: "acct-a"}, []int{24, 14, 4}},
			{"ok/by identifier of another account's orders", OrderFilter{Identifier: "n4.example.com", AccountID: "acct-b"}, nil},
			{"ok/by identifier and profile", OrderFilter{Identifier: "n3.example.com", Profile: "p"}, []int{23, 13, 3}},
			{"ok/by identifier in another profile", OrderFilter{Identifier: "n3.example.com", Profile: "q"}, nil},
			{"ok/by serial", OrderFilter{Serial: "5e07"}, []int{7}},
			{"ok/by serial and profile", OrderFilter{Serial: "5e07", Profile: "p"}, []int{7}},
			{"ok/by an unknown serial", OrderFilter{Serial: "5e99"}, nil},
			{"ok/by account, one page", OrderFilter{AccountID: "acct-b", Limit: 3}, []int{29, 27, 25}},
			{"ok/by status, one page", OrderFilter{Status: acme.StatusValid, Limit: 2}, []int{29, 28}},
			{"ok/by profile, one page", OrderFilter{Profile: "p", Limit: 2}, []int{29, 28}},
			{"ok/every order, the page after one", OrderFilter{After: orders[25].ID, Limit: 3}, []int{24, 23, 22}},
			{"ok/by account, the page after one", OrderFilter{AccountID: "acct-b", After: orders[25].ID, Limit: 2}, []int{23, 21}},
			{"ok/by identifier, the page after one", OrderFilter{Identifier: "n3.example.com", After: orders[13].ID}, []int{3}},
			{"ok/after an order that does not exist", OrderFilter{After: "nosuchorder"}, nil},
			{"ok/created since a time, that time's order first", OrderFilter{Since: t0.Add(27 * time.Minute)}, []int{29, 28, 27}},
			{"ok/by account, created since a time", OrderFilter{AccountID: "acct-a", Since: t0.Add(25 * time.Minute)}, []int{28, 26}},
			{"ok/by identifier, created since a time", OrderFilter{Identifier: "n3.example.com", Since: t0.Add(4 * time.Minute)}, []int{23, 13}},
			{"ok/created since a time, the page after one", OrderFilter{Since: t0.Add(26 * time.Minute), After: orders[28].ID}, []int{27, 26}},
			{"ok/created since a time after every order", OrderFilter{Since: t0.Add(time.Hour)}, nil},
		}
		for _, c := range cases {
			got, err := db.ListOrders(ctx, c.f)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			var gotIdx []int
			for _, o := range got {
				gotIdx = append(gotIdx, idx[o.ID])
				if o.Certificate == nil {
					t.Errorf("%s: order %d listed without its certificate", c.name, idx[o.ID])
				}
			}
			if !slices.Equal(gotIdx, c.want) {
				t.Errorf("%s: orders %v; want %v", c.name, gotIdx, c.want)
			}
		}
	})
}

// With a million orders, a search that sorts every order, or tests every
// order against a subquery, takes seconds; the plan must read an index
// in the page's order, or start from the few orders an identifier or a
// serial names. SQLite has no statistics here, so the plan it shows for
// the empty database is the one it uses at any size.
func TestTheOrderSearchReadsAnIndexInsteadOfEveryOrder(t *testing.T) {
	ctx := context.Background()
	db := openTest(t) // outside eachDialect: SQLite
	cases := []struct {
		name      string
		f         OrderFilter
		selective bool // found through their own index, then sorted
	}{
		{"ok/every order", OrderFilter{}, false},
		{"ok/by status", OrderFilter{Status: acme.StatusValid}, false},
		{"ok/by profile", OrderFilter{Profile: "p"}, false},
		{"ok/by account", OrderFilter{AccountID: "a"}, false},
		{"ok/the page after an order", OrderFilter{After: "o"}, false},
		{"ok/by status, the page after an order", OrderFilter{Status: acme.StatusValid, After: "o"}, false},
		{"ok/created since a time", OrderFilter{Since: t0}, false},
		{"ok/by status, created since a time", OrderFilter{Status: acme.StatusValid, Since: t0}, false},
		{"ok/by identifier, created since a time", OrderFilter{Identifier: "n.example.com", Since: t0}, true},
		{"ok/by identifier", OrderFilter{Identifier: "n.example.com"}, true},
		{"ok/by identifier and profile", OrderFilter{Identifier: "n.example.com", Profile: "p"}, true},
		{"ok/by identifier, profile and status", OrderFilter{Identifier: "n.example.com", Profile: "p", Status: acme.StatusValid}, true},
		{"ok/by serial", OrderFilter{Serial: "5e"}, true},
		{"ok/by serial and profile", OrderFilter{Serial: "5e", Profile: "p"}, true},
	}
	for _, c := range cases {
		stmt, args := listOrdersQuery(c.f)
		rows, err := db.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+stmt, args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		for _, step := range plan {
			bad := false
			switch {
			case strings.HasPrefix(step, "SCAN o"):
				// Reading orders in the page's order is what the
				// non-selective searches should do; any other scan
				// reads every order.
				bad = c.selective || !strings.Contains(step, "INDEX orders_created")
			case strings.Contains(step, "TEMP B-TREE"):
				bad = !c.selective
			case strings.HasPrefix(step, "SEARCH o "):
				// A selective search looks its few orders up by id;
				// through another index it reads every order of a
				// profile, status or account.
				bad = (c.selective && !strings.Contains(step, "(id=?)")) ||
					strings.HasPrefix(step, "SEARCH o USING INDEX orders_profile ")
			}
			if bad {
				t.Errorf("%s: plan %q reads every order (%s)", c.name, strings.Join(plan, "; "), step)
				break
			}
		}
	}
}
