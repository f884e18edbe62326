package relay

import (
	"context"
	"crypto/x509"
	"errors"
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
	// The old upstream was asked only to read its order, which the new
	// upstream's account could not (its kid is not one it knows).
	oldUp.mu.Lock()
	for k, n := range oldUp.n {
		if k != "POST my-order" {
			t.Errorf("the old upstream was asked %q %d times after the reload; want only reads of its order (%v)", k, n, oldUp.n)
		}
	}
	oldUp.mu.Unlock()
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

// Only an upstream order whose read failed is judged by its origin: an
// upstream that keeps its orders at another origin than its newOrder has
// them read as usual, never placed again while they answer.
func TestOnlyAnUpstreamOrderThatCouldNotBeReadIsTakenForAnotherUpstreams(t *testing.T) {
	up := newPebbleUpstream(t)
	b := pebbleBenchOn(t, up)
	c := b.s.client(&recorder{base: b.s.transport, now: b.clock.Now})
	here := up.srv.URL + "/my-order/1"
	elsewhere := "https://acme.other.example/order/1"
	readFailed := errors.New("HTTP 400 urn:ietf:params:acme:error:malformed")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		orderURL string
		readErr  error
		want     bool
	}{
		{"read, at another origin", context.Background(), elsewhere, nil, false},
		{"read, at the upstream's origin", context.Background(), here, nil, false},
		{"unread, at the upstream's origin", context.Background(), here, readFailed, false},
		{"unread, at another origin", context.Background(), elsewhere, readFailed, true},
		{"unread, at another origin, the attempt's context ended", cancelled, elsewhere, readFailed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ofAnotherUpstream(tc.ctx, c, tc.orderURL, tc.readErr); got != tc.want {
				t.Errorf("ofAnotherUpstream(%q, %v) = %v; want %v", tc.orderURL, tc.readErr, got, tc.want)
			}
		})
	}
}
