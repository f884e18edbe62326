// Package clocktest provides a clock that only moves when a test moves it,
// in the spirit of net/http/httptest: a test double shipped as its own
// package so production packages never carry it.
package clocktest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
)

// Fake is a clock.Clock whose time changes only through Advance and Set.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is added
}

// New returns a fake clock reading start.
func New(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

var _ clock.Clock = (*Fake)(nil)

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer registers a timer that fires when the fake time reaches Now+d.
func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	close(f.changed)
	f.changed = make(chan struct{})
	return t
}

// Advance moves the clock forward by d and fires every timer now due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the clock to t (never backwards) and fires every timer now due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.setLocked(t)
	}
}

func (f *Fake) setLocked(t time.Time) {
	f.now = t
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.at.After(t) {
			tm.c <- t
			continue
		}
		kept = append(kept, tm)
	}
	f.timers = kept
}

// NextTimer blocks until at least one timer is pending and returns the
// earliest deadline among them. It lets a test advance exactly as far as the
// code under test is waiting, without guessing durations.
func (f *Fake) NextTimer(ctx context.Context) (time.Time, error) {
	for {
		f.mu.Lock()
		if len(f.timers) > 0 {
			sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
			at := f.timers[0].at
			f.mu.Unlock()
			return at, nil
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, tm := range t.f.timers {
		if tm == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}
