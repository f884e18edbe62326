package caddyacmeproxy

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Let's Encrypt limits certificates per name for a week. Such a limit
// on one client's name fails that client's order, saying rateLimited,
// and pauses nothing else: before, the relay took every 429 for its
// account's and paused the whole profile for the upstream's Retry-After
// (at most a day), so one client renewing too often stopped every
// other client's certificates.
func TestAnUpstreamRateLimitOnANameFailsItsOrderAsRateLimitedAndPausesNoOtherName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newRelayBench(t)
	limited := "limited.example.com"
	p := b.start()
	c := p.client(t, ctx)

	o := b.readyOrder(t, ctx, c, limited)
	// Boulder's words and Retry-After for its limit on certificates for
	// one exact set of names (a week), to the relay's newOrder.
	b.pebble.refuseNextSaying(pebbleNewOrder, 1, http.StatusTooManyRequests, "urn:ietf:params:acme:error:rateLimited",
		fmt.Sprintf("too many certificates (5) already issued for %q in the last 168h0m0s, retry after 2026-12-12 00:00:00 UTC", limited), "604800")
	fctx, fcancel := context.WithTimeout(ctx, 15*time.Second)
	_, _, err := c.CreateOrderCert(fctx, o.FinalizeURL, relayCSR(t, limited), true)
	fcancel()
	if err == nil {
		t.Fatal("finalize succeeded for a name over the upstream's limit")
	}
	got, err := c.GetOrder(ctx, o.URI)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != acme.StatusInvalid || got.Error == nil {
		t.Fatalf("order is %q with error %v; want invalid with a problem", got.Status, got.Error)
	}
	if got.Error.ProblemType != "urn:ietf:params:acme:error:rateLimited" || strings.Contains(got.Error.Detail, "168h") {
		t.Errorf("the client's problem is %q %q; want rateLimited without the upstream's words", got.Error.ProblemType, got.Error.Detail)
	}
	ro, err := p.db.GetRelayOrder(ctx, path.Base(o.URI))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ro.FailureDetail, "too many certificates (5) already issued for \"limited.example.com\"") {
		t.Errorf("the operator's detail is %q; want the upstream's answer", ro.FailureDetail)
	}
	if j, _ := relayJob(t, p.queue, ro.OrderID); j.Status != store.JobFailed || j.Attempts != 1 {
		t.Errorf("relay job is %s after %d attempts; want failed after 1", j.Status, j.Attempts)
	}

	other := b.readyOrder(t, ctx, c, "other.example.com")
	octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
	defer ocancel()
	if _, _, err := c.CreateOrderCert(octx, other.FinalizeURL, relayCSR(t, "other.example.com"), true); err != nil {
		t.Errorf("another name's certificate after the limit on %s: %v; want it issued, the profile not paused", limited, err)
	}
}
