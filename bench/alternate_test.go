//go:build unix

package bench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// alternation splits a timed part into windows of one length, taking turns
// between two conditions — off (even windows) and on (odd ones) — so that
// a comparison of the two is made under the same machine: its speed and
// the CPU the hypervisor steals change by the minute on a shared host,
// and a row measured after another compares the minutes as much as the
// conditions. Each window begins with a guard, counted for neither, so
// that what the on condition started at the end of its window is not
// counted as off.
//
// harness.run classes each certificate by the window it started and ended
// in (one that spans a guard or two windows is counted for neither), and
// counts it done in the window it ended in.
type alternation struct {
	window, guard time.Duration

	mu    sync.Mutex
	start time.Time
	began chan struct{} // closed by begin
	lat   [2][]time.Duration
	done  [2]int
}

func newAlternation(window, guard time.Duration) *alternation {
	return &alternation{window: window, guard: guard, began: make(chan struct{})}
}

// begin starts the first (off) window at start.
func (a *alternation) begin(start time.Time) {
	a.mu.Lock()
	a.start = start
	a.mu.Unlock()
	close(a.began)
}

// at is the condition of t: 0 (off) or 1 (on), or -1 in a guard.
func (a *alternation) at(t time.Time) int {
	d := t.Sub(a.start)
	if d < 0 || d%a.window < a.guard {
		return -1
	}
	return int(d/a.window) % 2
}

// window0 is the condition of the window t lies in, a guard counted as
// its window: where a certificate begun at t is asked for.
func (a *alternation) window0(t time.Time) int {
	d := t.Sub(a.start)
	if d < 0 {
		return 0
	}
	return int(d/a.window) % 2
}

// add notes a certificate begun at t0 and done at t1.
func (a *alternation) add(t0, t1 time.Time) {
	c0, c1 := a.at(t0), a.at(t1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if c1 >= 0 {
		a.done[c1]++
	}
	if c0 >= 0 && c0 == c1 && t1.Sub(t0) < a.window {
		a.lat[c0] = append(a.lat[c0], t1.Sub(t0))
	}
}

// whileOn calls fn at the start of every on window past its guard and
// then every period while the window lasts, until ctx ends.
func (a *alternation) whileOn(ctx context.Context, period time.Duration, fn func()) {
	select {
	case <-a.began:
	case <-ctx.Done():
		return
	}
	for k := 1; ctx.Err() == nil; k += 2 {
		from := a.start.Add(time.Duration(k)*a.window + a.guard)
		until := a.start.Add(time.Duration(k+1) * a.window)
		for next := from; next.Before(until) && ctx.Err() == nil; next = next.Add(period) {
			if sleep(ctx, time.Until(next)) != nil {
				return
			}
			if time.Now().Before(until) { // not if the wait overran the window
				fn()
			}
		}
	}
}

// report adds, for each condition, its certificates per second (those done
// in its windows over their time past the guards), p50 and p99, and the
// ratio of the on windows' p99 to the off windows'.
func (a *alternation) report(b *testing.B, end time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var spent [2]time.Duration
	for t := a.start; t.Before(end); t = t.Add(a.window) {
		c := a.at(t.Add(a.guard))
		spent[c] += max(0, min(end.Sub(t), a.window)-a.guard)
	}
	var p99 [2]float64
	for c, name := range []string{"off", "on"} {
		slices.Sort(a.lat[c])
		p99[c] = ms(percentile(a.lat[c], 0.99))
		if spent[c] > 0 {
			b.ReportMetric(float64(a.done[c])/spent[c].Seconds(), name+"-certs/s")
		}
		b.ReportMetric(ms(percentile(a.lat[c], 0.50)), name+"-p50-ms")
		b.ReportMetric(p99[c], name+"-p99-ms")
		b.ReportMetric(float64(len(a.lat[c])), name+"-certs")
	}
	if p99[0] > 0 {
		b.ReportMetric(p99[1]/p99[0], "on/off-p99")
	}
}

func TestAnAlternationCountsACertificateOnlyForTheWindowItStartedAndEndedIn(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	s := time.Second
	for _, tc := range []struct {
		name       string
		t0, t1     time.Duration
		lat        [2]int // certificates timed, off and on
		done       [2]int // certificates done, off and on
		notCounted bool
	}{
		{name: "within an off window", t0: 2 * s, t1: 3 * s, lat: [2]int{1, 0}, done: [2]int{1, 0}},
		{name: "within an on window", t0: 5 * s, t1: 7 * s, lat: [2]int{0, 1}, done: [2]int{0, 1}},
		{name: "from an off window into an on one", t0: 3 * s, t1: 5 * s, done: [2]int{0, 1}},
		{name: "ending in a guard", t0: 2 * s, t1: 4*s + 100*time.Millisecond},
		{name: "starting in a guard", t0: 8*s + 100*time.Millisecond, t1: 9 * s, done: [2]int{1, 0}},
		{name: "from one off window to the next", t0: 1 * s, t1: 9 * s, done: [2]int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAlternation(4*s, 500*time.Millisecond)
			a.begin(start)
			a.add(at(tc.t0), at(tc.t1))
			if got := [2]int{len(a.lat[0]), len(a.lat[1])}; got != tc.lat {
				t.Errorf("timed (off, on) = %v, want %v", got, tc.lat)
			}
			if a.done != tc.done {
				t.Errorf("done (off, on) = %v, want %v", a.done, tc.done)
			}
		})
	}
}

func TestAnAlternationCallsItsOnWorkOnlyInsideOnWindowsPastTheirGuard(t *testing.T) {
	a := newAlternation(200*time.Millisecond, 40*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var calls []time.Time
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.whileOn(ctx, 50*time.Millisecond, func() {
			mu.Lock()
			calls = append(calls, time.Now())
			mu.Unlock()
		})
	}()
	a.begin(time.Now())
	time.Sleep(900 * time.Millisecond) // windows 0–4: on are 1 and 3
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(calls) < 4 {
		t.Fatalf("%d calls in two on windows of 160 ms at 50 ms, want at least 4", len(calls))
	}
	for _, c := range calls {
		if got := a.at(c); got != 1 {
			t.Errorf("called %v after the start, in condition %d, want on (1)", c.Sub(a.start), got)
		}
	}
}

func TestAnAlternationAsksForACertificateWhereTheWindowItBeginsInAsks(t *testing.T) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := time.Second
	a := newAlternation(4*s, 500*time.Millisecond)
	a.begin(start)
	for _, tc := range []struct {
		name string
		at   time.Duration
		want int
	}{
		{name: "before the first window", at: -s, want: 0},
		{name: "in the first window", at: 2 * s, want: 0},
		{name: "in the guard that opens an on window", at: 4*s + 100*time.Millisecond, want: 1},
		{name: "in an on window", at: 6 * s, want: 1},
		{name: "in the guard that opens the next off window", at: 8*s + 100*time.Millisecond, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.window0(start.Add(tc.at)); got != tc.want {
				t.Errorf("window0(start%+v) = %d, want %d", tc.at, got, tc.want)
			}
		})
	}
}
