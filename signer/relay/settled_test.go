package relay

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// An operator may retry a relay job whose order failed meanwhile (a cancel
// abandons the order): the attempt asks the upstream nothing and fails,
// saying why, rather than reporting done.
func TestARelayAttemptForAnOrderThatFailedAsksTheUpstreamNothing(t *testing.T) {
	ctx := context.Background()
	var asked atomic.Int32
	up := registeredUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "failed.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.db.FailOrder(ctx, req.OrderID, nil, "cancelled by an operator", time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(ctx, b.job(t, req.OrderID))
	if out.Kind() != "failed" || !strings.Contains(out.String(), "is invalid") {
		t.Errorf("the attempt: %s; want failed saying the order is invalid", out)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the upstream was asked %d times for an order that had failed", n)
	}
}
