package acmeproxy

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
)

// RFC 8555 §7.1.2.1: the server SHOULD NOT include invalid orders in an
// account's orders list — those made invalid and those pending past their
// expiry alike, as each order itself answers.
func TestAnAccountsOrdersListLeavesOutItsInvalidAndExpiredOrders(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		clk := clocktest.New(time.Now())
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = clk }})
		alice := e.rawClient()
		alice.register()
		expiring := alice.order(dnsID("expiring.example.com"))
		clk.Advance(8 * 24 * time.Hour) // past a new order's expiry
		if st := decodeAs[orderJSON](t, alice.read(expiring.url)).Status; st != "invalid" {
			t.Fatalf("the old order is %q; want invalid past its expiry", st)
		}
		deactivated := alice.order(dnsID("deactivated.example.com"))
		if r := alice.post(deactivated.Authorizations[0], map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("deactivating the authorization: %d %s", r.status, r.body)
		}
		if st := decodeAs[orderJSON](t, alice.read(deactivated.url)).Status; st != "invalid" {
			t.Fatalf("the order of a deactivated authorization is %q; want invalid", st)
		}
		pending := alice.order(dnsID("pending.example.com"))

		r := alice.read(alice.kid + "/orders")
		var list struct {
			Orders []string `json:"orders"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil {
			t.Fatalf("orders list: %d %s", r.status, r.body)
		}
		if !slices.Equal(list.Orders, []string{pending.url}) {
			t.Errorf("orders %q; want only the live order %q", list.Orders, pending.url)
		}
	})
}

// RFC 8555 §7.1.2.1: the list is read by POST-as-GET; a payload is a
// client's mistake, as on every other resource that is only read.
func TestAnAccountsOrdersListAskedWithAPayloadIsMalformed(t *testing.T) {
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	wantProblem(t, alice.post(alice.kid+"/orders", map[string]any{}, jwsOpts{}), http.StatusBadRequest, acme.ErrorMalformed)
}
