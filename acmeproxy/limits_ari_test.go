package acmeproxy

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// A renewal whose "replaces" names the account's certificate inside its
// ARI window is what the CA asked for: orders_per_account does not count
// it and duplicate_certificates does not refuse it (its certificate,
// once issued, counts as any other). Before the window it is an
// order like any other, and an order without "replaces" stays limited.
func TestARenewalInsideItsARIWindowIsNotCountedByTheOrderAndDuplicateLimits(t *testing.T) {
	long := 1000 * 24 * time.Hour // no refill while the test moves the clock
	e, clk, _ := limitEnv(t, func(l *LimitsConfig) {
		l.OrdersPerAccount = rate(1, long)
		l.DuplicateCertificates = rate(1, long)
	})
	ctx := context.Background()
	c := e.client(ctx)
	old := e.issue(ctx, c, "www.example.com") // the account's one order
	certID := certIDOf(old.leaf)
	alice := e.raw(c)
	newOrder := func(name, replaces string) rawResponse {
		p := map[string]any{"identifiers": []map[string]string{dnsID(name)}}
		if replaces != "" {
			p["replaces"] = replaces
		}
		return alice.post(e.url("/new-order"), p, jwsOpts{})
	}
	wantRateLimited(t, newOrder("www.example.com", certID), authority.LimitOrdersPerAccount, long)

	r := e.renewalInfo(certID)
	if r.status != http.StatusOK {
		t.Fatalf("renewal-info: %d %s", r.status, r.body)
	}
	w := decodeAs[renewalWindow](t, r)
	clk.Advance(w.SuggestedWindow.Start.Sub(clk.Now()) + time.Second)
	if r := newOrder("www.example.com", certID); r.status != http.StatusCreated {
		t.Fatalf("a renewal inside its window: %d %s; want it created", r.status, r.body)
	}
	// A second renewal of it while the first is live echoes "replaces"
	// but is not the replacement: the exemption covers one.
	wantRateLimited(t, newOrder("www.example.com", certID), authority.LimitOrdersPerAccount, long)
	wantRateLimited(t, newOrder("api.example.com", ""), authority.LimitOrdersPerAccount, long)
}

// The exemption covers a certificate's first replacement only: an
// account that abandons its exempt renewal (deactivating its
// authorization makes the order invalid) and orders again, in a loop,
// would otherwise place orders without limit. The renewal after an
// abandoned one is an order like any other, counted and refused by
// orders_per_account.
func TestARenewalAfterAnAbandonedExemptOneIsCountedByTheOrderLimit(t *testing.T) {
	long := 1000 * 24 * time.Hour // no refill while the test moves the clock
	e, clk, _ := limitEnv(t, func(l *LimitsConfig) { l.OrdersPerAccount = rate(1, long) })
	ctx := context.Background()
	c := e.client(ctx)
	old := e.issue(ctx, c, "www.example.com") // the account's one order
	certID := certIDOf(old.leaf)
	alice := e.raw(c)
	renew := func() rawResponse {
		return alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("www.example.com")}, "replaces": certID}, jwsOpts{})
	}
	w := decodeAs[renewalWindow](t, e.renewalInfo(certID))
	clk.Advance(w.SuggestedWindow.Start.Sub(clk.Now()) + time.Second)

	first := renew()
	if first.status != http.StatusCreated {
		t.Fatalf("the first renewal inside its window: %d %s; want it created", first.status, first.body)
	}
	if r := alice.post(decodeAs[orderJSON](t, first).Authorizations[0], map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
		t.Fatalf("deactivating the renewal's authorization: %d %s", r.status, r.body)
	}
	wantRateLimited(t, renew(), authority.LimitOrdersPerAccount, long)
}
