package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// limitedFleet is two instances, a and b, on one database and one
// upstream that answers every request but its directory's and nonces'
// with a 429 asking to wait two minutes; hits counts those requests.
// b prepares upstream orders; neither's finalize waits for its relay.
func limitedFleet(t *testing.T) (a, b *bench, up *httptest.Server, hits *atomic.Int32) {
	t.Helper()
	hits = new(atomic.Int32)
	up = fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		problemAnswer(http.StatusTooManyRequests, acme.ProblemTypeRateLimited, "too many new orders", "Retry-After", "120")(w, r)
	})
	dbs := openFleet(t, 2)
	clk := clocktest.New(time.Now())
	settler := &fakeSettler{issued: map[string][][]byte{}, failed: map[string][]string{}}
	a = benchOn(t, dbs[0], clk, settler, up.URL+"/dir", ChallengeBypass, func(o *Options) { o.FinalizeWait = -1 })
	b = benchOn(t, dbs[1], clk, settler, up.URL+"/dir", ChallengeBypass, func(o *Options) {
		o.FinalizeWait = -1
		o.PrepareUpstream = true
	})
	t.Cleanup(func() { _ = b.s.Close() })
	return a, b, up, hits
}

// relayRateLimited runs the relay of a new order on instance x, which the
// upstream answers with its 429.
func relayRateLimited(t *testing.T, x *bench, name string) {
	t.Helper()
	req := x.finalized(t, name)
	if _, err := x.s.Issue(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := x.s.RunJob(context.Background(), x.job(t, req.OrderID)).String(); !strings.HasPrefix(got, "retry after 2m0s: ") {
		t.Fatalf("the relay of %s: %s; want to wait the upstream's 2 minutes", name, got)
	}
}

// preparedOfAGoneOrder is the relay_prepared job, on instance x, of an
// upstream order prepared for a local order that is gone: due to
// deactivate it.
func preparedOfAGoneOrder(t *testing.T, x *bench, up *httptest.Server) *jobs.Job {
	t.Helper()
	ctx := context.Background()
	if _, _, err := x.queue.Enqueue(ctx, jobs.Spec{Kind: PreparedKind, Key: "gone",
		Payload: preparedPayload{Profile: "p", Order: "gone", Upstream: up.URL + "/order/1"}}); err != nil {
		t.Fatal(err)
	}
	js, err := x.queue.List(ctx, store.JobFilter{Kind: PreparedKind, Key: "gone"})
	if err != nil || len(js) != 1 {
		t.Fatalf("the relay_prepared job: %d (%v); want 1", len(js), err)
	}
	return &js[0]
}

// The upstream limits the account every instance on the database shares:
// once it told one instance to wait, another's relay waits out the rest
// of that wait rather than asking the upstream (and being told) again.
func TestARateLimitOneInstanceWasToldOfCoolsTheProfileDownOnTheOthers(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, _, hits := limitedFleet(t)
		relayRateLimited(t, a, "one.example.com")
		seen := hits.Load()
		two := b.finalized(t, "two.example.com")
		if _, err := b.s.Issue(ctx, two); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(30 * time.Second)
		if got := b.s.RunJob(ctx, b.job(t, two.OrderID)).String(); !strings.HasPrefix(got, "retry after 1m30s: ") {
			t.Errorf("instance b's relay during a's cool-down: %s; want it to wait out the rest of it", got)
		}
		if n := hits.Load() - seen; n != 0 {
			t.Errorf("instance b asked the upstream %d times during the cool-down; want none", n)
		}
		b.clock.Advance(90 * time.Second)
		b.s.RunJob(ctx, b.job(t, two.OrderID))
		if hits.Load() == seen {
			t.Errorf("instance b did not ask the upstream after the cool-down")
		}
	})
}

// A preparation (prepare_upstream on) asks the upstream nothing while
// another instance waits out the account's rate limit: the finalize
// relays what is not prepared.
func TestAPreparationOnAnotherInstanceAsksTheUpstreamNothingDuringACoolDown(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, _, hits := limitedFleet(t)
		relayRateLimited(t, a, "one.example.com")
		seen := hits.Load()
		b.finalizedAfter(t, "two.example.com", func(orderID string) {
			b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
			b.s.awaitPreparation(ctx, orderID, time.Minute)
		})
		if n := hits.Load() - seen; n != 0 {
			t.Errorf("instance b's preparation asked the upstream %d times during a's cool-down; want none", n)
		}
	})
}

// The deactivation of a prepared upstream order no finalize took waits
// out the rate limit another instance was told of, as a relay does.
func TestADeactivationOnAnotherInstanceWaitsOutACoolDown(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		a, b, up, hits := limitedFleet(t)
		relayRateLimited(t, a, "one.example.com")
		seen := hits.Load()
		if got := b.s.RunJob(context.Background(), preparedOfAGoneOrder(t, b, up)).String(); !strings.HasPrefix(got, "retry after 2m0s: ") {
			t.Errorf("instance b's deactivation during a's cool-down: %s; want it to wait out the cool-down", got)
		}
		if n := hits.Load() - seen; n != 0 {
			t.Errorf("instance b's deactivation asked the upstream %d times during a's cool-down; want none", n)
		}
	})
}

// A deactivation the upstream answers with a 429 cools the profile down
// for the relays too, on every instance.
func TestADeactivationToldOfARateLimitCoolsTheProfileDown(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		a, b, up, hits := limitedFleet(t)
		if got := b.s.RunJob(ctx, preparedOfAGoneOrder(t, b, up)).String(); !strings.HasPrefix(got, "retry after 2m0s: ") {
			t.Fatalf("instance b's deactivation: %s; want to wait the upstream's 2 minutes", got)
		}
		seen := hits.Load()
		one := a.finalized(t, "one.example.com")
		if _, err := a.s.Issue(ctx, one); err != nil {
			t.Fatal(err)
		}
		if got := a.s.RunJob(ctx, a.job(t, one.OrderID)).String(); !strings.HasPrefix(got, "retry after 2m0s: ") {
			t.Errorf("instance a's relay after b's deactivation was rate-limited: %s; want it to wait out the cool-down", got)
		}
		if n := hits.Load() - seen; n != 0 {
			t.Errorf("instance a's relay asked the upstream %d times during b's cool-down; want none", n)
		}
	})
}
