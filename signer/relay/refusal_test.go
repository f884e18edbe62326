package relay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

func TestAnUpstreamsRefusalOfTheClientsRequestFailsTheOrderWithThatRefusal(t *testing.T) {
	tests := []struct {
		name   string
		answer http.HandlerFunc
		// want is the refusal the order fails with; zero: the generic failure.
		want signer.Kind
	}{
		{"a name refused", problemAnswer(400, acme.ProblemTypeRejectedIdentifier, "forbidden by policy"), signer.KindRejectedIdentifier},
		{"CAA forbids the upstream", problemAnswer(403, acme.ProblemTypeCAA, "CAA record forbids issuance"), signer.KindCAA},
		{"the CSR refused", problemAnswer(400, acme.ProblemTypeBadCSR, "key too small"), signer.KindBadCSR},
		{"our account refused", problemAnswer(403, acme.ProblemTypeUnauthorized, "account is not allowed"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			up := registeredUpstream(t, tt.answer)
			b := newBench(t, up.URL+"/dir", ChallengeBypass)
			req := b.refused(ctx, t, "refused.example.com", "")
			b.checkRefusedOnce(t, req.OrderID, tt.want)
			if len(b.s.refusals) != 0 {
				t.Errorf("refusals kept after the abandon: %v", b.s.refusals)
			}
		})
	}
}

// An abandon whose failure of the order could not be recorded (the
// database away) says so, for the runner to call it again, and keeps the
// upstream's refusal for that call: the order then fails with it, not
// with the generic failure, and once.
func TestAnAbandonThatCouldNotFailTheOrderSaysSoAndTheRetryFailsItWithTheRefusal(t *testing.T) {
	ctx := context.Background()
	up := registeredUpstream(t, problemAnswer(400, acme.ProblemTypeBadCSR, "key too small"))
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "refused-in-outage.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	job := b.job(t, req.OrderID)
	out := b.s.RunJob(ctx, job)
	if out.Kind() != "failed" {
		t.Fatalf("the attempt: %s; want failed", out)
	}
	away := errors.New("the database is away")
	b.settler.mu.Lock()
	b.settler.failErr = away
	b.settler.mu.Unlock()
	if err := b.s.AbandonJob(ctx, job, out.String()); !errors.Is(err, away) {
		t.Fatalf("an abandon that could not fail the order: %v; want the settler's error", err)
	}
	b.settler.mu.Lock()
	b.settler.failErr = nil
	b.settler.mu.Unlock()
	if err := b.s.AbandonJob(ctx, job, out.String()); err != nil {
		t.Fatalf("the abandon tried again: %v", err)
	}
	b.checkRefusedOnce(t, req.OrderID, signer.KindBadCSR)
}

func TestARevocationTheUpstreamRefusesIsARefusalAndOneItCannotAnswerIsNot(t *testing.T) {
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		refused bool
	}{
		{"unauthorized", problemAnswer(403, acme.ProblemTypeUnauthorized, "the certificate is not this account's"), true},
		{"bad revocation reason", problemAnswer(400, acme.ProblemTypeBadRevocationReason, "reason 9 is not accepted"), true},
		{"server error", problemAnswer(500, acme.ProblemTypeServerInternal, "database down"), false},
		{"rate limited", problemAnswer(429, acme.ProblemTypeRateLimited, "slow down", "Retry-After", "5"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := registeredUpstream(t, tt.answer)
			b := newBench(t, up.URL+"/dir", ChallengeBypass)
			reason := 1
			err := b.s.Revoke(context.Background(), issuedLeaf(t), &reason)
			if err == nil {
				t.Fatal("Revoke succeeded against an upstream that answers with a problem")
			}
			if got := errors.Is(err, signer.ErrRevocationRefused); got != tt.refused {
				t.Errorf("Revoke: %v; refused = %v, want %v", err, got, tt.refused)
			}
		})
	}
}

// The refusal is held in the memory of the instance that heard it until
// its abandon: one that dies in between leaves the job running, and the
// instance that reclaims it once its lease lapses runs the attempt again,
// hears the refusal again (the upstream order was not finalized) and
// fails the order with it, once.
func TestARefusalHeardByAnInstanceThatDiedBeforeItsAbandonIsHeardAgainByTheNext(t *testing.T) {
	ctx := context.Background()
	up := registeredUpstream(t, problemAnswer(400, acme.ProblemTypeBadCSR, "key too small"))
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "refused-then-died.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	job := b.job(t, req.OrderID)
	if out := b.s.RunJob(ctx, job); out.Kind() != "failed" {
		t.Fatalf("the first instance's attempt: %s; want failed", out)
	}
	// The first instance dies here, its abandon never run.
	next := b.anotherInstance(t, up.URL+"/dir")
	out := next.RunJob(ctx, job)
	if out.Kind() != "failed" {
		t.Fatalf("the next instance's attempt: %s; want failed", out)
	}
	if err := next.AbandonJob(ctx, job, out.String()); err != nil {
		t.Fatal(err)
	}
	b.checkRefusedOnce(t, req.OrderID, signer.KindBadCSR)
}

// An upstream that finalizes asynchronously (Boulder, Let's Encrypt)
// answers the finalize with the order processing, or already invalid,
// and states its refusal as the order's error, not as the answer's
// problem; Pebble never does (its issuance cannot fail). The client
// hears that refusal as it would hear the same problem answered at once.
func TestAnUpstreamOrderInvalidWithAnErrorFailsTheOrderWithThatRefusal(t *testing.T) {
	tests := []struct {
		name string
		// finalize is the order's status in the finalize's answer.
		finalize string
		// problem is the type of the upstream order's error.
		problem string
		// want is the refusal the order fails with; zero: the generic failure.
		want signer.Kind
	}{
		{"the CSR refused after processing", acme.StatusProcessing, acme.ProblemTypeBadCSR, signer.KindBadCSR},
		{"the key refused after processing", acme.StatusProcessing, acme.ProblemTypeBadPublicKey, signer.KindBadCSR},
		{"a name refused after processing", acme.StatusProcessing, acme.ProblemTypeRejectedIdentifier, signer.KindRejectedIdentifier},
		{"CAA forbids the upstream after processing", acme.StatusProcessing, acme.ProblemTypeCAA, signer.KindCAA},
		{"the CSR refused in the finalize's answer", acme.StatusInvalid, acme.ProblemTypeBadCSR, signer.KindBadCSR},
		{"a name refused in the finalize's answer", acme.StatusInvalid, acme.ProblemTypeUnsupportedIdentifier, signer.KindRejectedIdentifier},
		{"the upstream's own fault after processing", acme.StatusProcessing, acme.ProblemTypeServerInternal, 0},
		{"our account refused after processing", acme.StatusProcessing, acme.ProblemTypeUnauthorized, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var up *httptest.Server
			order := func(status string) string {
				o := map[string]any{
					"status":         status,
					"identifiers":    []map[string]string{{"type": "dns", "value": "refused-later.example.com"}},
					"authorizations": []string{},
					"finalize":       up.URL + "/finalize/1",
				}
				if status == acme.StatusInvalid {
					o["error"] = map[string]any{"type": tt.problem, "detail": "refused by the upstream's policy", "status": 400}
				}
				out, err := json.Marshal(o)
				if err != nil {
					t.Error(err)
				}
				return string(out)
			}
			up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", up.URL+"/order/1")
				switch r.URL.Path {
				case "/order":
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte(order(acme.StatusReady)))
				case "/finalize/1":
					_, _ = w.Write([]byte(order(tt.finalize)))
				case "/order/1":
					_, _ = w.Write([]byte(order(acme.StatusInvalid)))
				default:
					http.NotFound(w, r)
				}
			})
			b := newBench(t, up.URL+"/dir", ChallengeBypass, func(o *Options) { o.FinalizeWait = -1 })
			req := b.refused(ctx, t, "refused-later.example.com", tt.problem)
			b.checkRefusedOnce(t, req.OrderID, tt.want)
		})
	}
}

// A refusal is held for the abandon the runner calls next. An attempt
// whose lease lapsed before it returned is not abandoned here (the
// runner that took its job over runs it again and hears the refusal
// itself): its refusal is held until its order expires, when no attempt
// of its job can run any more, and not past that.
func TestARefusalNoAbandonCameForIsHeldUntilItsOrderExpiresAndNoLonger(t *testing.T) {
	ctx := context.Background()
	up := registeredUpstream(t, problemAnswer(400, acme.ProblemTypeBadCSR, "key too small"))
	b := newBench(t, up.URL+"/dir", ChallengeBypass, func(o *Options) { o.FinalizeWait = -1 })
	refuse := func(name string) string {
		t.Helper()
		req := b.finalized(t, name)
		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
		if out := b.s.RunJob(ctx, b.job(t, req.OrderID)); out.Kind() != "failed" {
			t.Fatalf("the attempt for %s: %s; want failed", name, out)
		}
		return req.OrderID
	}
	held := func(orderID string) bool {
		b.s.mu.Lock()
		defer b.s.mu.Unlock()
		_, ok := b.s.refusals[orderID]
		return ok
	}
	lost := refuse("lease-lost.example.com") // its runner lost the lease: no abandon
	ro, err := b.db.GetRelayOrder(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(ro.Expires.Sub(b.clock.Now()) - time.Second)
	refuse("before-expiry.example.com")
	if !held(lost) {
		t.Fatal("the refusal was dropped before its order expired, while an abandon may still come for it")
	}
	b.clock.Advance(2 * time.Second)
	after := refuse("after-expiry.example.com")
	if held(lost) {
		t.Error("the refusal of an order that expired is still held")
	}
	if !held(after) {
		t.Error("the refusal just heard is not held")
	}
}

// An upstream that rate-limits a revocation limits the relay's account:
// the revocation is to wait as long as it says, without spending an
// attempt, and so is every other request of the profile — a relay, and
// the next revocation — until then.
func TestARevocationTheUpstreamRateLimitedCoolsTheWholeProfileDown(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int32
	up := registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		problemAnswer(429, acme.ProblemTypeRateLimited, "too many revocations", "Retry-After", "120")(w, r)
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass, func(o *Options) { o.FinalizeWait = -1 })
	reason := 1
	wantWait := func(what string, err error, d time.Duration) {
		t.Helper()
		if we, ok := errors.AsType[*signer.WaitError](err); !ok || we.After != d || we.Spend {
			t.Errorf("%s: %v; want a wait of %s that spends no attempt", what, err, d)
		}
	}
	wantWait("the revocation", b.s.Revoke(ctx, issuedLeaf(t), &reason), 2*time.Minute)
	seen := hits.Load()
	b.clock.Advance(30 * time.Second)
	req := b.finalized(t, "after-a-revocation.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); !strings.HasPrefix(out, "retry after 1m30s: ") {
		t.Errorf("a relay during the cool-down: %s; want it to wait out the rest", out)
	}
	wantWait("the next revocation", b.s.Revoke(ctx, issuedLeaf(t), &reason), 90*time.Second)
	if hits.Load() != seen {
		t.Errorf("the upstream was asked %d times more during the cool-down; want none", hits.Load()-seen)
	}
}
