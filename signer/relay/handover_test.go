package relay

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An attempt that runs once its finalize has answered must read the
// mapping as the store has it then, or it would relay an order an
// operator settled meanwhile.
func TestAnAttemptAfterItsFinalizeAnsweredRelaysOnlyWhatTheStoreStillHasInProgress(t *testing.T) {
	ctx := context.Background()
	var asked atomic.Int64
	up := registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "later.example.com")
	// No runner here: the finalize only queues the job and answers.
	out, err := b.s.Issue(ctx, req)
	if err != nil || !out.Pending {
		t.Fatalf("Issue = %+v, %v; want pending", out, err)
	}
	if err := b.db.SettleRelayOrder(ctx, req.OrderID, store.RelayInvalid, "cancelled by the operator", b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if got := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); got != "done" {
		t.Errorf("the attempt after the operator settled the relay: %s; want done, nothing left to relay", got)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the attempt asked the upstream %d times about a relay the store has settled", n)
	}
}
