package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/mholt/acmez/v3/acme"
)

// readyUpstream is an upstream whose new order (/order/1) is ready at
// once, as an upstream that reuses its account's authorizations answers,
// and that also knows /order/2. Each finalize is passed to finalized,
// which answers it.
func readyUpstream(t *testing.T, finalized func(w http.ResponseWriter, r *http.Request)) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/order", "/order/1", "/order/2":
			n := "1"
			if r.URL.Path == "/order/2" {
				n = "2"
			}
			w.Header().Set("Location", up.URL+"/order/"+n)
			if r.URL.Path == "/order" {
				w.WriteHeader(http.StatusCreated)
			}
			_, _ = w.Write([]byte(`{"status":"ready","identifiers":[{"type":"dns","value":"gate.example.com"}],"authorizations":[],"finalize":"` + up.URL + `/finalize/` + n + `"}`))
		case "/finalize/1", "/finalize/2":
			finalized(w, r)
		default:
			http.NotFound(w, r)
		}
	})
	return up
}

// refuse ends an attempt at its upstream finalize: the test has seen what
// it came for.
var refuse = problemAnswer(http.StatusForbidden, acme.ProblemTypeUnauthorized, "refused by the test")

func TestTheUpstreamOrderIsRecordedBeforeItIsFinalized(t *testing.T) {
	ctx := context.Background()
	var (
		b       *bench
		orderID string
		mu      sync.Mutex
		seen    []string // the upstream order the mapping names at each finalize
	)
	up := readyUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// The URL of the placed order is recorded by a durable write
		// beside the relay's next requests; against an upstream whose
		// order is ready at once, the finalize comes right after the
		// placement, so only the wait for the record puts it first.
		ro, err := b.db.GetRelayOrder(r.Context(), orderID)
		mu.Lock()
		seen = append(seen, ro.UpstreamOrderURL)
		mu.Unlock()
		if err != nil {
			t.Errorf("reading the mapping at the upstream finalize: %v", err)
		}
		refuse(w, r)
	})
	b = newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "gate.example.com")
	orderID = req.OrderID
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	b.s.RunJob(ctx, b.job(t, req.OrderID))
	mu.Lock()
	defer mu.Unlock()
	if want := []string{up.URL + "/order/1"}; !slices.Equal(seen, want) {
		t.Errorf("at the upstream finalize the mapping named %q; want %q, recorded first", seen, want)
	}
}

func TestAnAttemptThatFindsAnotherUpstreamOrderRecordedFinalizesThatOne(t *testing.T) {
	ctx := context.Background()
	var (
		mu        sync.Mutex
		finalized []string
	)
	up := readyUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		finalized = append(finalized, r.URL.Path)
		mu.Unlock()
		refuse(w, r)
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "gate.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	// This attempt read the mapping before another one (whose lease
	// this one took over) recorded the upstream order it placed.
	stale, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.SetRelayUpstreamOrder(ctx, req.OrderID, up.URL+"/order/2", b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	bd, log, err := b.s.binding()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.relay(ctx, b.s.upstream, &recorder{base: b.s.transport, now: b.clock.Now}, bd, log, stale); err == nil {
		t.Fatal("the attempt succeeded; want it to end at the refused finalize")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/finalize/2"}; !slices.Equal(finalized, want) {
		t.Errorf("finalized %q upstream; want %q: the recorded order, never the one this attempt placed", finalized, want)
	}
	ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil || ro.UpstreamOrderURL != up.URL+"/order/2" {
		t.Errorf("the mapping names %q (%v); want the first record kept", ro.UpstreamOrderURL, err)
	}
}
