package relay

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/wfe"
)

// heldNewOrder is a transport that holds the first upstream newOrder it
// sees, once armed, until release is called or a second newOrder comes.
type heldNewOrder struct {
	next http.RoundTripper

	mu       sync.Mutex
	armed    bool
	held     chan struct{} // closed when the first newOrder is held
	released chan struct{}
	once     sync.Once
	orders   int // newOrders since armed
}

func (h *heldNewOrder) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.held, h.released = true, make(chan struct{}), make(chan struct{})
}

func (h *heldNewOrder) release() { h.once.Do(func() { close(h.released) }) }

func (h *heldNewOrder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/order-plz") {
		h.mu.Lock()
		armed := h.armed
		if armed {
			h.orders++
		}
		n := h.orders
		h.mu.Unlock()
		switch {
		case armed && n == 1:
			close(h.held)
			select {
			case <-h.released:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		case armed:
			h.release() // a second order: the first may go on
		}
	}
	return h.next.RoundTrip(req)
}

func TestARelayWaitsForItsOrdersPreparationStillPlacingTheUpstreamOrderAndRelaysThatOne(t *testing.T) {
	ctx := context.Background()
	up := newPebbleUpstream(t)
	held := &heldNewOrder{next: up.srv.Client().Transport}
	b := newBench(t, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = held
		o.FinalizeWait = -1 // the finalize's wait for the preparation is over at once
		o.PrepareUpstream = true
	})
	b.relayThrough(t, "warm.example.com") // registers the account
	up.reset()
	held.arm()

	// The preparation's upstream newOrder is slow: it is still under way
	// when the client finalizes.
	req := b.finalizedAfter(t, "slow.example.com", func(orderID string) {
		b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
		<-held.held
	})
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	b.s.awaitingPreparation = held.release
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("relay: %s", out)
	}
	b.s.awaitPreparation(ctx, req.OrderID, time.Minute)

	if n := up.count("POST order-plz"); n != 1 {
		t.Errorf("%d upstream orders placed for one local order; want 1, the prepared one relayed", n)
	}
	prepared, err := b.s.preparedUpstream(ctx, b.queue, req.OrderID)
	if err != nil || prepared == "" {
		t.Fatalf("the preparation recorded %q (%v); want its upstream order", prepared, err)
	}
	if ro, err := b.db.GetRelayOrder(ctx, req.OrderID); err != nil || ro.UpstreamOrderURL != prepared {
		t.Errorf("relayed %q (%v); want the prepared %q", ro.UpstreamOrderURL, err, prepared)
	}
}
