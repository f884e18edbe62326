package operator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A page cursor that names no row is a mistake (a mistyped id, or a row
// the retention sweep removed since the previous page): an empty page
// would read as the end of the list.
func TestAPageCursorNamingNoRowIsRefusedAndOneNamingARowContinuesTheList(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	now := time.Now().Truncate(time.Millisecond)
	legacyCert(t, db, now, "one.example.com", []byte{1})
	legacyCert(t, db, now.Add(time.Second), "two.example.com", []byte{1})
	op := &Operator{DB: db, Clock: clocktest.New(now)}

	orders, err := op.ListOrders(ctx, store.OrderFilter{Limit: 1})
	if err != nil || len(orders.Items) != 1 || orders.Next == "" {
		t.Fatalf("first page of orders: %+v, %v; want one order and a cursor", orders, err)
	}
	if next, err := op.ListOrders(ctx, store.OrderFilter{Limit: 1, After: orders.Next}); err != nil || len(next.Items) != 1 || next.Items[0].ID == orders.Items[0].ID {
		t.Errorf("second page of orders: %+v, %v; want the other order", next, err)
	}
	accounts, err := op.ListAccounts(ctx, store.AccountFilter{Limit: 1})
	if err != nil || len(accounts.Items) != 1 || accounts.Next == "" {
		t.Fatalf("first page of accounts: %+v, %v; want one account and a cursor", accounts, err)
	}
	if next, err := op.ListAccounts(ctx, store.AccountFilter{Limit: 1, After: accounts.Next}); err != nil || len(next.Items) != 1 || next.Items[0].ID == accounts.Items[0].ID {
		t.Errorf("second page of accounts: %+v, %v; want the other account", next, err)
	}

	for name, list := range map[string]func(after string) error{
		"orders": func(after string) error { _, err := op.ListOrders(ctx, store.OrderFilter{After: after}); return err },
		"accounts": func(after string) error {
			_, err := op.ListAccounts(ctx, store.AccountFilter{After: after})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := list("no-such-row")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "after") || !strings.Contains(err.Error(), "no-such-row") {
				t.Errorf("a cursor naming no row: %v; want ErrInvalid naming after and the cursor", err)
			}
		})
	}
}

// pageOrder stores at at an account of profile and its pending order for
// name, and returns their ids.
func pageOrder(t *testing.T, db *store.DB, at time.Time, profile, name string) (account, order string) {
	t.Helper()
	ctx := context.Background()
	acct, _, err := db.CreateAccount(ctx, store.Account{Profile: profile, Thumbprint: store.NewID(), KeyJWK: []byte(`{}`)}, at)
	if err != nil {
		t.Fatal(err)
	}
	id := acme.Identifier{Type: "dns", Value: name}
	o, err := db.CreateOrder(ctx, store.Order{Profile: profile, AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Expires: at.Add(time.Hour)},
		[]store.Authz{{Identifier: id, Expires: at.Add(time.Hour), Challenges: []store.Challenge{{Type: "http-01", Token: store.NewID()}}}}, at)
	if err != nil {
		t.Fatal(err)
	}
	return acct.ID, o.ID
}

// A page cursor naming a row that the listed set cannot hold — another
// profile's order or account, another account's order, an order without
// the listed identifier or serial or created before since — is a mistake
// (a cursor pasted from another list): taken as a position, it would
// start the page somewhere in another list and skip or repeat rows of
// this one.
func TestAPageCursorNamingARowOutsideTheListedSetIsRefused(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	now := time.Now().Truncate(time.Millisecond)
	op := &Operator{DB: db, Clock: clocktest.New(now)}
	accountA, orderA := pageOrder(t, db, now, "a", "one.example.com")
	accountB, orderB := pageOrder(t, db, now.Add(time.Second), "b", "two.example.com")
	_, orderA2 := pageOrder(t, db, now.Add(2*time.Second), "a", "three.example.com")
	serial := legacyCert(t, db, now.Add(3*time.Second), "four.example.com", []byte{1})
	legacyCert(t, db, now.Add(4*time.Second), "five.example.com", []byte{1})

	orders := func(f store.OrderFilter) error { _, err := op.ListOrders(ctx, f); return err }
	for _, tc := range []struct {
		name, after, says string
		list              func() error
	}{
		{"orders/of another profile", orderB, "profile b, not a", func() error { return orders(store.OrderFilter{Profile: "a", After: orderB}) }},
		{"orders/of another account", orderA2, "not " + accountA, func() error { return orders(store.OrderFilter{AccountID: accountA, After: orderA2}) }},
		{"orders/without the identifier", orderA, "identifier", func() error {
			return orders(store.OrderFilter{Identifier: "three.example.com", After: orderA})
		}},
		{"orders/without the serial", orderA, "serial " + serial, func() error { return orders(store.OrderFilter{Serial: serial, After: orderA}) }},
		{"orders/created before since", orderA, "since", func() error { return orders(store.OrderFilter{Since: now.Add(time.Second), After: orderA}) }},
		{"accounts/of another profile", accountB, "profile b, not a", func() error {
			_, err := op.ListAccounts(ctx, store.AccountFilter{Profile: "a", After: accountB})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.list()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "after") || !strings.Contains(err.Error(), tc.after) ||
				!strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v; want ErrInvalid naming after, the cursor %s and %q", err, tc.after, tc.says)
			}
		})
	}
}

// An order of the previous page that changed status since still marks
// where the next page of a list by status starts: its status is not what
// the cursor is checked against.
func TestAPageCursorWhoseOrderChangedStatusSinceContinuesTheList(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	now := time.Now().Truncate(time.Millisecond)
	op := &Operator{DB: db, Clock: clocktest.New(now)}
	_, older := pageOrder(t, db, now, "a", "one.example.com")
	_, newer := pageOrder(t, db, now.Add(time.Second), "a", "two.example.com")
	first, err := op.ListOrders(ctx, store.OrderFilter{Profile: "a", Status: acme.StatusPending, Limit: 1})
	if err != nil || len(first.Items) != 1 || first.Next != newer {
		t.Fatalf("first page: %+v, %v; want %s and a cursor", first, err, newer)
	}
	if err := db.FailOrder(ctx, newer, []byte(`{}`), "test", now); err != nil {
		t.Fatal(err)
	}
	next, err := op.ListOrders(ctx, store.OrderFilter{Profile: "a", Status: acme.StatusPending, Limit: 1, After: first.Next})
	if err != nil || len(next.Items) != 1 || next.Items[0].ID != older {
		t.Errorf("next page: %+v, %v; want %s", next, err, older)
	}
}
