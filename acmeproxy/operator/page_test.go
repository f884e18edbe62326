package operator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
