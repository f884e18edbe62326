package relay

import (
	"strings"
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
