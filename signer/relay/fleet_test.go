package relay

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/dialecttest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testDialects are the databases a fleet of instances shares in the
// tests that must hold for both. A place is where one database lives:
// stores opened on one place share it, as Caddy processes sharing a
// SQLite file or a PostgreSQL database do.
var testDialects = []struct {
	name  string
	place func(t testing.TB) string
	open  func(ctx context.Context, place string) (*store.DB, error)
}{
	{"sqlite",
		func(t testing.TB) string { return filepath.Join(t.TempDir(), "acme.db") },
		func(ctx context.Context, path string) (*store.DB, error) {
			return store.OpenSQLite(ctx, path, store.SQLiteOptions{})
		}},
	{"postgres",
		pgtest.DSN,
		func(ctx context.Context, dsn string) (*store.DB, error) {
			return store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
		}},
}

// eachDialect runs body once per dialect, as subtests named after it.
func eachDialect(t *testing.T, body func(t *testing.T)) {
	for _, d := range testDialects {
		t.Run(d.name, body)
	}
}

// openFleet opens n stores on one fresh place of the test's dialect: n
// instances' pools on one database.
func openFleet(t *testing.T, n int) []*store.DB {
	t.Helper()
	names := make([]string, len(testDialects))
	for i, d := range testDialects {
		names[i] = d.name
	}
	d := testDialects[dialecttest.Of(t.Name(), names)]
	place := d.place(t)
	dbs := make([]*store.DB, n)
	for i := range dbs {
		db, err := d.open(context.Background(), place)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[i] = db
	}
	return dbs
}

// preparingFleet is two instances, a and b, with prepare_upstream on, on
// one database and one Pebble, whose upstream account is registered and
// whose upstream requests are counted from here on. a's transport holds
// its first newOrder once armed (see heldRequest). Neither's finalize
// waits for its relay: the test runs the jobs.
func preparingFleet(t *testing.T) (a, b *bench, up *pebbleUpstream, held *heldRequest) {
	t.Helper()
	up = newPebbleUpstream(t)
	dbs := openFleet(t, 2)
	clk := clocktest.New(time.Now())
	settler := &fakeSettler{issued: map[string][][]byte{}, failed: map[string][]string{}}
	held = &heldRequest{next: up.srv.Client().Transport, part: "/order-plz"}
	a = benchOn(t, dbs[0], clk, settler, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = held
		o.FinalizeWait = -1
		o.PrepareUpstream = true
	})
	b = benchOn(t, dbs[1], clk, settler, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = up.srv.Client().Transport
		o.FinalizeWait = -1
		o.PrepareUpstream = true
	})
	a.relayThrough(t, "warm.example.com") // registers the account
	up.reset()
	held.arm()
	// Runs before the stores close: nothing is left held.
	t.Cleanup(func() {
		held.release()
		_ = a.s.Close()
		_ = b.s.Close()
	})
	return a, b, up, held
}

// The new-order reached instance a, which prepares the upstream order;
// a's newOrder upstream is slow, and the client's finalize reaches
// instance b, whose relay must not place a second upstream order.
func TestARelayOnAnotherInstanceWaitsForThePreparationPlacingTheUpstreamOrderAndRelaysThatOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, up, held := preparingFleet(t)
		req := a.finalizedAfter(t, "fleet.example.com", func(orderID string) {
			a.s.PrepareOrder(ctx, orderID, a.clock.Now().Add(time.Hour))
			<-held.held // a's newOrder is on its way
		})

		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
		b.s.awaitingPlacement = held.release // a's newOrder is answered once b waits for it
		if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
			t.Fatalf("b's relay: %s", out)
		}
		held.release()
		a.s.awaitPreparation(ctx, req.OrderID, time.Minute) // a's preparation is over

		if n := up.count("POST order-plz"); n != 1 {
			t.Errorf("%d upstream orders placed for one local order by two instances; want 1", n)
		}
		if len(a.settler.issued[req.OrderID]) < 2 {
			t.Errorf("the order's chain has %d certificates; want the relayed leaf and its issuer", len(a.settler.issued[req.OrderID]))
		}
		p, err := b.db.GetRelayPlacement(ctx, req.OrderID)
		if err != nil || !p.Placed() {
			t.Fatalf("the placement: %+v (%v); want the upstream order a placed", p, err)
		}
		if ro, err := b.db.GetRelayOrder(ctx, req.OrderID); err != nil || ro.UpstreamOrderURL != p.UpstreamOrderURL {
			t.Errorf("b relayed %q (%v); want the order a prepared, %q", ro.UpstreamOrderURL, err, p.UpstreamOrderURL)
		}
	})
}

// An instance killed while placing the upstream order of an order leaves
// its claim behind; the relay on another instance waits for the claim
// to lapse, then places the order itself.
func TestARelayTakesOverTheClaimADeadInstanceLeftOnceItLapses(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		_, b, up, _ := preparingFleet(t)
		req := b.finalizedAfter(t, "orphan.example.com", func(orderID string) {
			// What the dead instance's preparation left: a live claim
			// and no upstream order.
			now := b.clock.Now()
			if _, won, err := b.db.ClaimRelayPlacement(ctx, orderID, "dead", now, now.Add(placementClaim)); err != nil || !won {
				t.Fatalf("the dead instance's claim: %v %v", won, err)
			}
		})

		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
		waited := false
		b.s.awaitingPlacement = func() {
			waited = true
			b.clock.Advance(placementClaim)
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if out := b.s.RunJob(rctx, b.job(t, req.OrderID)).String(); out != "done" {
			t.Fatalf("b's relay: %s", out)
		}
		if !waited {
			t.Error("the relay did not wait for the dead instance's live claim")
		}
		if n := up.count("POST order-plz"); n != 1 {
			t.Errorf("%d upstream orders placed; want 1, b's", n)
		}
		p, err := b.db.GetRelayPlacement(ctx, req.OrderID)
		if err != nil || p.Owner == "dead" || !p.Placed() {
			t.Errorf("the placement: %+v (%v); want b's claim, its order recorded", p, err)
		}
	})
}

// triggerFirst is a transport that, before the first POST to an upstream
// challenge it sees, has another party trigger that challenge: the order's
// preparation, here or on another instance, answering the same upstream
// order as the relay.
type triggerFirst struct {
	next    http.RoundTripper
	once    sync.Once
	trigger func(chalURL string) error
	err     error
}

func (t *triggerFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.Contains(req.URL.Path, "/chalZ/") {
		t.once.Do(func() { t.err = t.trigger(req.URL.String()) })
	}
	return t.next.RoundTrip(req)
}

func TestAChallengeAnotherInstanceTriggeredJustBeforeTheRelayDidIsWaitedForNotFailed(t *testing.T) {
	ctx := context.Background()
	up := newPebbleUpstream(t)
	other := pebbleBenchOn(t, up) // the instance answering the same upstream order
	trig := &triggerFirst{next: up.srv.Client().Transport, trigger: func(chalURL string) error {
		acct, err := other.s.account(ctx, other.s.upstream, "p")
		if err != nil {
			return err
		}
		_, err = other.s.upstream.InitiateChallenge(ctx, acct, acme.Challenge{URL: chalURL})
		return err
	}}
	b := benchOn(t, other.db, other.clock, other.settler, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = trig
		o.FinalizeWait = -1
	})

	req := b.finalized(t, "raced.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Errorf("the relay: %s; want done, the challenge the other triggered waited for", out)
	}
	if trig.err != nil {
		t.Fatalf("the other instance triggering the challenge: %v", trig.err)
	}
	if n := up.count("POST chalZ"); n != 2 {
		t.Errorf("%d challenge POSTs; want 2, the other's and the relay's", n)
	}
	if len(b.settler.issued[req.OrderID]) < 2 {
		t.Errorf("the order's chain has %d certificates; want the leaf and its issuer", len(b.settler.issued[req.OrderID]))
	}
}

// A preparation records its upstream order in its relay_prepared job,
// then in the placement; one killed in between left its claim live and
// its order named only by the job, which the relay relays rather than
// placing another once the claim lapses.
func TestARelayRelaysTheOrderOfAPreparationKilledBeforeRecordingItsPlacement(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, up, held := preparingFleet(t)
		held.release() // a's requests go through
		req := b.finalizedAfter(t, "halfway.example.com", func(orderID string) {
			now := b.clock.Now()
			if _, won, err := b.db.ClaimRelayPlacement(ctx, orderID, "dead", now, now.Add(placementClaim)); err != nil || !won {
				t.Fatalf("the dead instance's claim: %v %v", won, err)
			}
		})
		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
		// What the dead instance did after the finalize read nothing:
		// it placed the upstream order and named it in its job.
		bd, log, err := a.s.binding()
		if err != nil {
			t.Fatal(err)
		}
		acct, err := a.s.account(ctx, a.s.upstream, "p")
		if err != nil {
			t.Fatal(err)
		}
		ro, err := a.db.GetRelayOrder(ctx, req.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		order, err := a.s.placeOrder(ctx, a.s.upstream, acct, bd, log, ro, acme.Order{Identifiers: identifiersOf(ro.Identifiers)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.queue.Enqueue(ctx, jobs.Spec{Kind: PreparedKind, Key: req.OrderID,
			Payload: preparedPayload{Profile: "p", Order: req.OrderID, Upstream: order.Location}, RunAt: ro.Expires}); err != nil {
			t.Fatal(err)
		}
		b.s.awaitingPlacement = func() { b.clock.Advance(placementClaim) }

		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if out := b.s.RunJob(rctx, b.job(t, req.OrderID)).String(); out != "done" {
			t.Fatalf("b's relay: %s", out)
		}
		if n := up.count("POST order-plz"); n != 1 {
			t.Errorf("%d upstream orders placed; want 1, the dead instance's relayed", n)
		}
		if got, err := b.db.GetRelayOrder(ctx, req.OrderID); err != nil || got.UpstreamOrderURL != order.Location {
			t.Errorf("relayed %q (%v); want the dead instance's %q", got.UpstreamOrderURL, err, order.Location)
		}
	})
}
