package acmeproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"path"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
)

// pendingSigner accepts every order and finishes none, with an answer to
// how long it takes when wait is set.
type pendingSigner struct {
	*localca.Signer
	wait *signer.Wait
	req  signer.IssueRequest // the last one
	// looked, when set, runs as the signer is asked how long an order
	// takes, before it answers.
	looked func(ctx context.Context, orderID string)
}

func (l *pendingSigner) Issue(_ context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	l.req = req
	return signer.IssueOutcome{Pending: true}, nil
}

type estimatingSigner struct{ *pendingSigner }

func (e estimatingSigner) ExpectedWait(ctx context.Context, orderID string) signer.Wait {
	if e.looked != nil {
		e.looked(ctx, orderID)
	}
	return *e.wait
}

func TestAProcessingOrderTellsTheClientToComeBackWhenItsSignerExpectsToBeDone(t *testing.T) {
	dur := func(d time.Duration) *time.Duration { return &d }
	tests := []struct {
		name     string
		estimate *time.Duration // nil: the signer gives none
		want     string
	}{
		{"ok/no estimate: a second", nil, "1"},
		{"ok/an estimate is rounded up to whole seconds", dur(2300 * time.Millisecond), "3"},
		{"ok/a wait already over: a second, never zero", dur(-time.Second), "1"},
		{"ok/a long wait is capped at ten minutes", dur(3 * time.Hour), "600"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			later := &pendingSigner{}
			if tc.estimate != nil {
				later.wait = &signer.Wait{For: *tc.estimate, Known: true}
			}
			e := newTestEnvWith(t, envOptions{wrap: func(l *localca.Signer) signer.Signer {
				later.Signer = l
				if tc.estimate == nil {
					return later
				}
				return estimatingSigner{later}
			}})
			c, o, csr := readyOrder(t, ctx, e, "later.example.com")
			r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
			var got struct{ Status string }
			_ = json.Unmarshal(r.body, &got)
			if r.status != http.StatusOK || got.Status != "processing" {
				t.Fatalf("finalize: %d %s; want a processing order", r.status, r.body)
			}
			if ra := r.header.Get("Retry-After"); ra != tc.want {
				t.Errorf("finalize: Retry-After %q; want %q", ra, tc.want)
			}
			r = e.raw(c).post(o.URI, nil, jwsOpts{})
			if ra := r.header.Get("Retry-After"); r.status != http.StatusOK || ra != tc.want {
				t.Errorf("polling the order: %d, Retry-After %q; want %q", r.status, ra, tc.want)
			}
		})
	}
}

// An order processing while no work on it is under way — its signer signs
// within the request and faulted, or its signer's job was lost — moves
// only when the resume sweep hands it to the signer again: the client is
// told to come back then, not every second. Within signTimeout of the
// claim a finalize may still be signing it, and work that is due or under
// way may end at any moment: a second then.
func TestAProcessingOrderNothingWorksOnTellsTheClientToComeBackWhenTheResumeSweepTakesIt(t *testing.T) {
	idle, busy := &signer.Wait{Idle: true}, &signer.Wait{}
	tests := []struct {
		name string
		wait *signer.Wait // nil: the signer gives no estimate (it signs within the request)
		// handover, when set, queues the order's signer_issue job to run
		// this long after the poll (0: due).
		handover *time.Duration
		after    time.Duration // between the finalize and the poll
		// settles: the signer records the order's certificate as the poll
		// asks it how long it takes (after the poll read the order), its
		// work then over.
		settles bool
		want    string
	}{
		{name: "ok/signing in the request, just claimed: a second", after: 30 * time.Second, want: "1"},
		{name: "ok/signing in the request, claimed two minutes ago: until the sweep takes it", after: 2 * time.Minute, want: "180"},
		{name: "ok/signing in the request, past the sweep's cutoff: the next sweep", after: 6 * time.Minute, want: "60"},
		{name: "ok/signer idle, claimed two minutes ago: until the sweep takes it", wait: idle, after: 2 * time.Minute, want: "180"},
		{name: "ok/signer idle, just claimed: a second", wait: idle, after: 30 * time.Second, want: "1"},
		{name: "ok/signer busy without an estimate: a second", wait: busy, after: 2 * time.Minute, want: "1"},
		{name: "ok/signer idle but the order's handover due: a second", wait: idle, handover: new(time.Duration(0)),
			after: 2 * time.Minute, want: "1"},
		{name: "ok/signer idle but the order's handover waiting: until its attempt", wait: idle, handover: new(90 * time.Second),
			after: 2 * time.Minute, want: "90"},
		{name: "ok/signer idle because it settled the order since the poll read it: a second", wait: idle, settles: true,
			after: 2 * time.Minute, want: "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				// On whole milliseconds, as the store keeps times.
				fake := clocktest.New(time.Now().Truncate(time.Millisecond))
				later := &pendingSigner{wait: tc.wait}
				e := newTestEnvWith(t, envOptions{
					opts: func(o *Options) { o.Clock = fake },
					wrap: func(l *localca.Signer) signer.Signer {
						later.Signer = l
						if tc.wait == nil {
							return later
						}
						return estimatingSigner{later}
					}})
				c, o, csr := readyOrder(t, ctx, e, "stuck.example.com")
				r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
				var got struct{ Status string }
				_ = json.Unmarshal(r.body, &got)
				if r.status != http.StatusOK || got.Status != "processing" {
					t.Fatalf("finalize: %d %s; want a processing order", r.status, r.body)
				}
				fake.Advance(tc.after)
				if tc.settles {
					later.looked = func(ctx context.Context, orderID string) {
						later.looked = nil
						out, err := later.Signer.Issue(ctx, later.req)
						if err == nil {
							err = e.srv.Authority().Issued(ctx, orderID, out.Chain)
						}
						if err != nil {
							t.Errorf("settling the order: %v", err)
						}
					}
				}
				if tc.handover != nil {
					// In no lane the test's runner serves: it stays as queued.
					if _, _, err := e.queue.Enqueue(ctx, jobs.Spec{Kind: signer.IssueKind, Key: path.Base(o.URI), Lane: "elsewhere",
						RunAt: fake.Now().Add(*tc.handover)}); err != nil {
						t.Fatal(err)
					}
				}
				r = e.raw(c).post(o.URI, nil, jwsOpts{})
				if ra := r.header.Get("Retry-After"); r.status != http.StatusOK || ra != tc.want {
					t.Errorf("polling the order %s after the finalize: %d, Retry-After %q; want %q", tc.after, r.status, ra, tc.want)
				}
				if tc.settles {
					r = e.raw(c).post(o.URI, nil, jwsOpts{})
					_ = json.Unmarshal(r.body, &got)
					if r.status != http.StatusOK || got.Status != "valid" {
						t.Errorf("polling again: %d %s; want the order valid", r.status, r.body)
					}
				}
			})
		})
	}
}

// A finalize whose signing faulted answers the order processing, and the
// resume sweep takes it StuckAfter after the claim — not after the order
// became ready, however long it waited for its finalize.
func TestAFinalizeWhoseSigningFaultedCountsTheWaitFromItsClaim(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		fake := clocktest.New(time.Now().Truncate(time.Millisecond))
		sg := &faultySigner{}
		sg.faults.Store(1)
		e := newTestEnvWith(t, envOptions{
			opts: func(o *Options) { o.Clock = fake },
			wrap: func(l *localca.Signer) signer.Signer { sg.Signer = l; return sg }})
		c, o, csr := readyOrder(t, ctx, e, "faulted.example.com")
		fake.Advance(time.Hour) // ready, waiting for its finalize
		r := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
		var got struct{ Status string }
		_ = json.Unmarshal(r.body, &got)
		if r.status != http.StatusOK || got.Status != "processing" {
			t.Fatalf("finalize: %d %s; want a processing order", r.status, r.body)
		}
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Errorf("finalize: Retry-After %q; want \"1\" (a finalize may still be signing it)", ra)
		}
		fake.Advance(2 * time.Minute)
		r = e.raw(c).post(o.URI, nil, jwsOpts{})
		if ra := r.header.Get("Retry-After"); r.status != http.StatusOK || ra != "180" {
			t.Errorf("polling two minutes after the claim: %d, Retry-After %q; want \"180\"", r.status, ra)
		}
	})
}
