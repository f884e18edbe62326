package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestUpstreamPollingStartsFastBacksOffAndHonoursRetryAfter(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name        string
		retryAfters []time.Duration // the upstream's, one per poll (0: none)
		want        []time.Duration
		wantErrAt   int // index of the wait that exceeds the budget; -1 for none
	}{
		{"ok/doubling from the poll interval up to the cap", make([]time.Duration, 7),
			[]time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms}, -1},
		{"ok/the upstream's Retry-After wins", []time.Duration{0, 300 * ms, 0},
			[]time.Duration{5 * ms, 300 * ms, 10 * ms}, -1},
		{"fail/a wait past the budget ends the attempt", []time.Duration{0, 900 * ms, 2 * time.Second},
			[]time.Duration{5 * ms, 900 * ms}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Signer{opts: Options{PollInterval: 5 * ms, MaxPoll: 100 * ms}}
			p := s.poller(time.Second, "o")
			p.note = nil
			for i, ra := range tc.retryAfters {
				d, err := p.wait(ra)
				if i == tc.wantErrAt {
					if err == nil || !strings.Contains(err.Error(), "still in progress") {
						t.Fatalf("wait %d: %s, %v; want the budget exceeded", i, d, err)
					}
					return
				}
				if err != nil || d != tc.want[i] {
					t.Fatalf("wait %d: %s, %v; want %s", i, d, err, tc.want[i])
				}
			}
		})
	}
}

// Within an attempt, an upstream order still processing is read again
// when the upstream's Retry-After says, not at the signer's first,
// sub-millisecond poll interval: a 1 s Retry-After is waited out before
// the next read.
func TestAnUpstreamOrderStillProcessingIsReadAgainOnlyAfterItsRetryAfter(t *testing.T) {
	ctx := context.Background()
	var (
		up       *httptest.Server
		mu       sync.Mutex
		answered time.Time // when the new order was answered
		reads    []time.Time
	)
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		retryAfter := "1"
		mu.Lock()
		switch r.URL.Path {
		case "/order":
			answered = time.Now()
		case "/order/1":
			reads = append(reads, time.Now())
			retryAfter = "300" // past the attempt's budget: the attempt ends
		default:
			mu.Unlock()
			http.NotFound(w, r)
			return
		}
		mu.Unlock()
		w.Header().Set("Location", up.URL+"/order/1")
		w.Header().Set("Retry-After", retryAfter)
		_, _ = w.Write([]byte(`{"status":"processing","identifiers":[{"type":"dns","value":"paced.example.com"}],"finalize":"` + up.URL + `/finalize/1"}`))
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "paced.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); !strings.HasPrefix(out, "retry after 5m0s: ") {
		t.Errorf("outcome %q; want to come back when the upstream's second answer said", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reads) != 1 {
		t.Fatalf("the upstream order was read %d times in the attempt; want once, after its Retry-After", len(reads))
	}
	if gap := reads[0].Sub(answered); gap < 900*time.Millisecond {
		t.Errorf("the upstream order was read again %v after it answered Retry-After: 1; want a second", gap)
	}
}

// While the upstream validates, the relay reads the order again when the
// upstream's Retry-After on the challenge it triggered says, not at the
// signer's first, sub-millisecond poll interval.
func TestAnUpstreamValidationIsWaitedForAsTheChallengesRetryAfterSays(t *testing.T) {
	ctx := context.Background()
	var (
		up        *httptest.Server
		mu        sync.Mutex
		triggered time.Time // when the challenge was answered
		reads     []time.Time
	)
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		order := func(status int, state, retryAfter string) {
			w.Header().Set("Location", up.URL+"/order/1")
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"status":"` + state + `","identifiers":[{"type":"dns","value":"validated.example.com"}],` +
				`"authorizations":["` + up.URL + `/authz/1"],"finalize":"` + up.URL + `/finalize/1"}`))
		}
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/order":
			order(http.StatusCreated, "pending", "0")
		case "/authz/1":
			_, _ = w.Write([]byte(`{"status":"pending","identifier":{"type":"dns","value":"validated.example.com"},` +
				`"challenges":[{"type":"http-01","status":"pending","url":"` + up.URL + `/chall/1","token":"tok"}]}`))
		case "/chall/1":
			triggered = time.Now()
			w.Header().Set("Retry-After", "1")
			_, _ = w.Write([]byte(`{"type":"http-01","status":"processing","url":"` + up.URL + `/chall/1","token":"tok"}`))
		case "/order/1":
			reads = append(reads, time.Now())
			// Validated; issuing for longer than the attempt waits: the
			// attempt ends.
			order(http.StatusOK, "processing", "600")
		default:
			http.NotFound(w, r)
		}
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "validated.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	mu.Lock()
	defer mu.Unlock()
	if triggered.IsZero() || len(reads) != 1 {
		t.Fatalf("outcome %q; the challenge triggered at %v, the order read %d times while validating; want once, after its Retry-After",
			out, triggered, len(reads))
	}
	if gap := reads[0].Sub(triggered); gap < 900*time.Millisecond {
		t.Errorf("the order was read %v after the challenge answered Retry-After: 1; want a second", gap)
	}
}
