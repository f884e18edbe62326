// Package clock lets code that schedules work take its notion of "now" and
// its timers from the caller, so tests can drive time instead of sleeping.
package clock

import "time"

// Clock is the source of the current time and of timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d after Now.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that schedulers use.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// At is a clock that reads now when it is made and moves on from there
// by the wall clock's monotonic reading; its timers are the wall
// clock's: for work whose caller is handed a time rather than a clock (a
// sweep's), timed by that time moved on by how long the work took. A
// zero now gives the wall clock.
func At(now time.Time) Clock {
	if now.IsZero() {
		return Real()
	}
	return atClock{at: now, began: time.Now()}
}

type atClock struct{ at, began time.Time }

func (c atClock) Now() time.Time                 { return c.at.Add(time.Since(c.began)) }
func (c atClock) NewTimer(d time.Duration) Timer { return Real().NewTimer(d) }
