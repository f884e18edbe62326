package relay

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"

	"github.com/letsencrypt/pebble/v2/wfe"
)

// failFinalize makes up answer every finalize 503 from now on.
func (u *pebbleUpstream) failFinalize() {
	u.mu.Lock()
	defer u.mu.Unlock()
	inner := u.pebble
	u.pebble = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/finalize-order/") {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// A reload that points a relay profile at another upstream (the old one
// is down, or left) finishes the orders in flight there: an order placed
// at the old upstream, not yet finalized, is placed again at the new one,
// which issues it, and the old one is asked nothing more.
func TestARelayWhoseUpstreamAReloadChangedRelaysItsOrderInFlightToTheNewOne(t *testing.T) {
	ctx := context.Background()
	oldUp, newUp := newPebbleUpstream(t), newPebbleUpstream(t)
	before := pebbleBenchOn(t, oldUp)
	req := before.finalized(t, "moved.example.com")
	if _, err := before.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	oldUp.failFinalize()
	if out := before.s.RunJob(ctx, before.job(t, req.OrderID)).String(); !strings.HasPrefix(out, "retry") {
		t.Fatalf("the attempt whose finalize the old upstream refused: %s; want retry", out)
	}
	ro, err := before.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil || !strings.HasPrefix(ro.UpstreamOrderURL, oldUp.srv.URL) {
		t.Fatalf("the relay's upstream order: %q (%v); want one at the old upstream %s", ro.UpstreamOrderURL, err, oldUp.srv.URL)
	}

	// The reload: the profile's signer now relays to the new upstream,
	// on the same database.
	after := benchOn(t, before.db, before.clock, before.settler, newUp.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = newUp.srv.Client().Transport
		o.FinalizeWait = -1
	})
	oldUp.reset()
	if out := after.s.RunJob(ctx, after.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("the attempt after the reload: %s; want done", out)
	}
	chain := after.settler.issued[req.OrderID]
	if len(chain) < 2 {
		t.Fatalf("a chain of %d certificates; want the leaf and its issuer", len(chain))
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "moved.example.com" {
		t.Fatalf("leaf %v (%v)", leaf, err)
	}
	if n := newUp.count("POST finalize-order"); n != 1 {
		t.Errorf("the new upstream finalized %d orders; want 1", n)
	}
	oldUp.mu.Lock()
	asked := len(oldUp.n)
	oldUp.mu.Unlock()
	if asked != 0 {
		t.Errorf("the old upstream was asked %v after the reload; want nothing", oldUp.n)
	}
	if ro, err := after.db.GetRelayOrder(ctx, req.OrderID); err != nil || !strings.HasPrefix(ro.UpstreamOrderURL, newUp.srv.URL) {
		t.Errorf("the relay's upstream order after the reload: %q (%v); want the new upstream's", ro.UpstreamOrderURL, err)
	}
}

func TestAnUpstreamOrderIsTheUpstreamsWhenItSharesSchemeHostAndPortWithItsNewOrder(t *testing.T) {
	for _, tc := range []struct {
		name, order, newOrder string
		same                  bool
	}{
		{"same/host", "https://acme.example/order/1", "https://acme.example/new-order", true},
		{"same/default port written", "https://acme.example:443/order/1", "https://ACME.example/new-order", true},
		{"other/host", "https://acme-staging.example/order/1", "https://acme.example/new-order", false},
		{"other/port", "https://127.0.0.1:14000/my-order/1", "https://127.0.0.1:14001/order-plz", false},
		{"other/scheme", "http://acme.example/order/1", "https://acme.example/new-order", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameOrigin(tc.order, tc.newOrder); got != tc.same {
				t.Errorf("sameOrigin(%q, %q) = %v; want %v", tc.order, tc.newOrder, got, tc.same)
			}
		})
	}
}
