package relay

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/wfe"
)

// heldRequest is a transport that holds, once armed, the first upstream
// POST to a path holding part until release is called, its request
// is cancelled, or a second such POST comes (which it lets through).
type heldRequest struct {
	next http.RoundTripper
	part string
	// answered holds the first with the upstream's answer in hand, until
	// release or its cancellation, and then returns that answer.
	answered bool

	mu       sync.Mutex
	armed    bool
	held     chan struct{} // closed when the first is held
	released chan struct{}
	once     sync.Once
	n        int // such POSTs since armed
}

func (h *heldRequest) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.held, h.released = true, make(chan struct{}), make(chan struct{})
}

func (h *heldRequest) release() { h.once.Do(func() { close(h.released) }) }

func (h *heldRequest) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.Contains(req.URL.Path, h.part) {
		h.mu.Lock()
		armed := h.armed
		if armed {
			h.n++
		}
		n := h.n
		h.mu.Unlock()
		switch {
		case armed && n == 1 && h.answered:
			resp, err := h.next.RoundTrip(req)
			if err != nil {
				return nil, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return nil, err
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			close(h.held)
			select {
			case <-h.released:
			case <-req.Context().Done():
			}
			return resp, nil
		case armed && n == 1:
			close(h.held)
			select {
			case <-h.released:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		case armed:
			h.release() // a second one: the first may go on
		}
	}
	return h.next.RoundTrip(req)
}

// heldBench is a Pebble bench with prepare_upstream on whose account is
// registered, the upstream's requests counted from here on, and whose
// transport holds the first POST to a path holding part once armed.
// The finalize's wait for a preparation is over at once.
func heldBench(t *testing.T, part string) (*bench, *pebbleUpstream, *heldRequest) {
	t.Helper()
	up := newPebbleUpstream(t)
	held := &heldRequest{next: up.srv.Client().Transport, part: part}
	b := newBench(t, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = held
		o.FinalizeWait = -1
		o.PrepareUpstream = true
	})
	b.relayThrough(t, "warm.example.com") // registers the account
	up.reset()
	held.arm()
	// Runs before the bench's store closes: nothing is left held.
	t.Cleanup(func() {
		held.release()
		_ = b.s.Close()
	})
	return b, up, held
}

// preparing is how many preparations the signer has under way.
func (s *Signer) preparingNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.preparing)
}

func TestARelayWaitsForItsOrdersPreparationStillPlacingTheUpstreamOrderAndRelaysThatOne(t *testing.T) {
	ctx := context.Background()
	b, up, held := heldBench(t, "/order-plz")

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
	prepared, err := b.s.preparedUpstream(ctx, b.binding(t), req.OrderID)
	if err != nil || prepared == "" {
		t.Fatalf("the preparation recorded %q (%v); want its upstream order", prepared, err)
	}
	if ro, err := b.db.GetRelayOrder(ctx, req.OrderID); err != nil || ro.UpstreamOrderURL != prepared {
		t.Errorf("relayed %q (%v); want the prepared %q", ro.UpstreamOrderURL, err, prepared)
	}
}

func TestClosingTheSignerStopsAPreparationStillPlacingItsUpstreamOrderAndWaitsForIt(t *testing.T) {
	ctx := context.Background()
	b, up, held := heldBench(t, "/order-plz")
	req := b.finalizedAfter(t, "unloaded.example.com", func(orderID string) {
		b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
		<-held.held
	})

	if err := b.s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := b.s.preparingNow(); n != 0 {
		t.Fatalf("%d preparations still under way after Close; want none, each stopped and waited for", n)
	}
	if n := up.count("POST order-plz"); n != 0 {
		t.Errorf("the upstream got %d new orders; want none, the held one cancelled", n)
	}
	if got, err := b.s.preparedUpstream(ctx, b.binding(t), req.OrderID); err != nil || got != "" {
		t.Errorf("a relay_prepared record names %q (%v); want none for an order never placed", got, err)
	}
}

func TestAPreparationClosedAfterPlacingItsUpstreamOrderLeavesItRecordedWithNoChallengeAnswered(t *testing.T) {
	ctx := context.Background()
	b, up, held := heldBench(t, "/authZ/")
	req := b.finalizedAfter(t, "placed.example.com", func(orderID string) {
		b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
		<-held.held // the order is placed; its authorization is being read
	})

	if err := b.s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := b.s.preparingNow(); n != 0 {
		t.Fatalf("%d preparations still under way after Close; want none, each stopped and waited for", n)
	}
	if n := up.count("POST chalZ"); n != 0 {
		t.Errorf("the upstream got %d challenge answers; want none after Close", n)
	}
	if n := up.count("POST order-plz"); n != 1 {
		t.Fatalf("the upstream got %d new orders; want the 1 placed before Close", n)
	}
	if got, err := b.s.preparedUpstream(ctx, b.binding(t), req.OrderID); err != nil || got == "" {
		t.Errorf("the relay_prepared record names %q (%v); want the upstream order placed, for its job to deactivate", got, err)
	}
}

func TestAPreparationClosedAsTheUpstreamAnswersItsNewOrderStillRecordsTheOrder(t *testing.T) {
	ctx := context.Background()
	b, up, held := heldBench(t, "/order-plz")
	held.answered = true
	req := b.finalizedAfter(t, "answered.example.com", func(orderID string) {
		b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
		<-held.held // the upstream placed the order; its answer is on its way
	})

	if err := b.s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := up.count("POST order-plz"); n != 1 {
		t.Fatalf("the upstream got %d new orders; want the 1 placed as Close came", n)
	}
	if got, err := b.s.preparedUpstream(ctx, b.binding(t), req.OrderID); err != nil || got == "" {
		t.Errorf("the relay_prepared record names %q (%v); want the upstream order placed, for its job to deactivate", got, err)
	}
}

func TestAClosedSignerStartsNoPreparation(t *testing.T) {
	ctx := context.Background()
	b, up, _ := heldBench(t, "/order-plz")
	if err := b.s.Close(); err != nil {
		t.Fatal(err)
	}
	b.finalizedAfter(t, "late.example.com", func(orderID string) {
		b.s.PrepareOrder(ctx, orderID, b.clock.Now().Add(time.Hour))
	})
	if n := b.s.preparingNow(); n != 0 {
		t.Errorf("%d preparations under way after Close; want none started", n)
	}
	if n := up.count("POST order-plz"); n != 0 {
		t.Errorf("the upstream got %d new orders; want none", n)
	}
}
