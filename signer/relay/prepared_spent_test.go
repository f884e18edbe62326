package relay

import (
	"context"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/acme"
	"github.com/letsencrypt/pebble/v2/core"
	"github.com/letsencrypt/pebble/v2/wfe"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// preparedBench is a Pebble bench with prepare_upstream on whose account
// is registered, the upstream's requests counted from here on.
func preparedBench(t *testing.T) (*bench, *pebbleUpstream) {
	t.Helper()
	up := newPebbleUpstream(t)
	b := newBench(t, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = up.srv.Client().Transport
		o.FinalizeWait = -1 // the test runs the job itself
		o.PrepareUpstream = true
	})
	b.relayThrough(t, "warm.example.com")
	up.reset()
	t.Cleanup(func() { _ = b.s.Close() })
	return b, up
}

// finalizedPrepared is a finalized order for name whose upstream order
// was prepared to the end (ready upstream) while the client proved its
// names, and then aged at the upstream as age makes it; with the URL of
// the prepared upstream order.
func (b *bench) finalizedPrepared(t *testing.T, up *pebbleUpstream, name string, age func(o *core.Order, now time.Time)) (signer.IssueRequest, string) {
	t.Helper()
	ctx := context.Background()
	var prepared string
	req := b.finalizedAfter(t, name, func(orderID string) {
		b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
		b.s.awaitPreparation(ctx, orderID, time.Minute)
		var err error
		if prepared, err = b.s.preparedUpstream(ctx, b.binding(t), orderID); err != nil || prepared == "" {
			t.Fatalf("the preparation recorded %q (%v); want its upstream order", prepared, err)
		}
		o := up.db.GetOrderByID(path.Base(prepared))
		if o == nil || o.Status != acme.StatusReady {
			t.Fatalf("the prepared upstream order is %v; want it ready", o)
		}
		age(o, b.clock.Now())
	})
	return req, prepared
}

// eachAuthz runs f on each authorization of o, locked.
func eachAuthz(o *core.Order, f func(a *core.Authorization)) {
	o.RLock()
	authzs := o.AuthorizationObjects
	o.RUnlock()
	for _, a := range authzs {
		a.Lock()
		f(a)
		a.Unlock()
	}
}

func TestAPreparedUpstreamOrderThatCannotBeFinishedAnyMoreIsReplacedByAFreshOne(t *testing.T) {
	tests := []struct {
		name string
		age  func(o *core.Order, now time.Time)
	}{
		{"its authorization expired (the client took longer than it lives upstream)", func(o *core.Order, now time.Time) {
			eachAuthz(o, func(a *core.Authorization) {
				a.ExpiresDate = now.Add(-time.Minute)
				a.Expires = a.ExpiresDate.UTC().Format(time.RFC3339)
			})
		}},
		{"its authorization expires in 10 s", func(o *core.Order, now time.Time) {
			eachAuthz(o, func(a *core.Authorization) {
				a.ExpiresDate = now.Add(10 * time.Second)
				a.Expires = a.ExpiresDate.UTC().Format(time.RFC3339)
			})
		}},
		{"it expires in 10 s", func(o *core.Order, now time.Time) {
			o.Lock()
			defer o.Unlock()
			o.ExpiresDate = now.Add(10 * time.Second)
			o.Expires = o.ExpiresDate.UTC().Format(time.RFC3339)
		}},
		{"its authorization was deactivated", func(o *core.Order, _ time.Time) {
			eachAuthz(o, func(a *core.Authorization) { a.Status = acme.StatusDeactivated })
		}},
		{"its challenge failed upstream during the preparation", func(o *core.Order, _ time.Time) {
			eachAuthz(o, func(a *core.Authorization) { a.Status = acme.StatusInvalid })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			b, up := preparedBench(t)
			req, prepared := b.finalizedPrepared(t, up, "aged.example.com", tt.age)
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
				t.Fatalf("relay: %s; want done, through a fresh upstream order", out)
			}
			if n := up.count("POST order-plz"); n != 2 {
				t.Errorf("%d upstream orders placed; want 2, the prepared one and the fresh one", n)
			}
			ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
			if err != nil || ro.UpstreamOrderURL == "" || ro.UpstreamOrderURL == prepared {
				t.Errorf("the relay records upstream order %q (%v); want the fresh one, not the prepared %q", ro.UpstreamOrderURL, err, prepared)
			}
			b.settler.mu.Lock()
			defer b.settler.mu.Unlock()
			if chain := b.settler.issued[req.OrderID]; len(chain) < 2 {
				t.Errorf("the order was issued a chain of %d certificates; want the certificate", len(chain))
			}
		})
	}
}

func TestAPreparedUpstreamOrderWithItsLifeAheadIsRelayedAsItIs(t *testing.T) {
	ctx := context.Background()
	b, up := preparedBench(t)
	req, prepared := b.finalizedPrepared(t, up, "fresh.example.com", func(*core.Order, time.Time) {})
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("relay: %s", out)
	}
	if n := up.count("POST order-plz"); n != 1 {
		t.Errorf("%d upstream orders placed; want the prepared one alone", n)
	}
	if ro, err := b.db.GetRelayOrder(ctx, req.OrderID); err != nil || ro.UpstreamOrderURL != prepared {
		t.Errorf("the relay records upstream order %q (%v); want the prepared %q", ro.UpstreamOrderURL, err, prepared)
	}
}

// The upstream reuses its account's valid authorizations (Pebble here
// always; Boulder too): the authorization a preparation had validated
// for an order that was never finalized may be the one the upstream order
// of a later order for the same name stands on. The earlier order's
// relay_prepared job, come due, must not deactivate it under the later
// one, whose upstream order would then be invalid.
func TestADeactivationLeavesValidTheAuthorizationALiveOrderForTheNameMayStandOn(t *testing.T) {
	ctx := context.Background()
	up := newPebbleUpstreamOf(t, pebbleKnobs{authzReuse: 100})
	b := newBench(t, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = up.srv.Client().Transport
		o.FinalizeWait = -1
		o.PrepareUpstream = true
	})
	t.Cleanup(func() { _ = b.s.Close() })
	b.relayThrough(t, "warm.example.com")
	const name = "shared.example.com"
	earlier, first := b.finalizedPrepared(t, up, name, func(*core.Order, time.Time) {})
	// The earlier order is over here, never relayed, while its
	// authorization lives on upstream.
	if err := b.db.FailOrder(ctx, earlier.OrderID, nil, "over", b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	req, second := b.finalizedPrepared(t, up, name, func(*core.Order, time.Time) {})
	if authzs := upstreamAuthzs(up, first); len(authzs) != 1 || !slices.Equal(upstreamAuthzs(up, second), authzs) {
		t.Fatalf("the later upstream order's authorizations %v; want the earlier's %v, reused", upstreamAuthzs(up, second), authzs)
	}
	if _, _, err := b.queue.Enqueue(ctx, jobs.Spec{Kind: PreparedKind, Key: "gone",
		Payload: preparedPayload{Profile: "p", Order: "gone", Upstream: first}}); err != nil {
		t.Fatal(err)
	}
	js, err := b.queue.List(ctx, store.JobFilter{Kind: PreparedKind, Key: "gone"})
	if err != nil || len(js) != 1 {
		t.Fatalf("the earlier order's relay_prepared job: %d (%v)", len(js), err)
	}
	if out := b.s.RunJob(ctx, &js[0]).String(); out != "done" {
		t.Fatalf("the earlier order's relay_prepared job: %s", out)
	}
	shared := up.db.GetAuthorizationByID(upstreamAuthzs(up, first)[0])
	shared.RLock()
	status := shared.Status
	shared.RUnlock()
	if status != acme.StatusValid {
		t.Errorf("the shared authorization is %s after the deactivation; want it valid", status)
	}

	up.reset()
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("the later order's relay: %s", out)
	}
	if n := up.count("POST order-plz"); n != 0 {
		t.Errorf("%d upstream orders placed for the later order; want none, its prepared one relayed", n)
	}
}

// upstreamAuthzs are the IDs of the authorizations of the upstream order
// at url.
func upstreamAuthzs(up *pebbleUpstream, url string) []string {
	o := up.db.GetOrderByID(path.Base(url))
	if o == nil {
		return nil
	}
	o.RLock()
	defer o.RUnlock()
	var ids []string
	for _, a := range o.AuthorizationObjects {
		ids = append(ids, a.ID)
	}
	return ids
}
