// Package logevery spaces the log lines of a condition that every request
// or every poll meets while it lasts (a database that is away, a full
// disk): the first time it is met, then at most once an interval, each
// line with how many times it was met since the last. One line each would
// bury the log, and on a full disk fill the disk the log lives on.
package logevery

import (
	"sync"
	"sync/atomic"
	"time"
)

// Limiter decides when a condition is logged. The zero value logs every
// time; set Every.
type Limiter struct {
	Every time.Duration

	mu     sync.Mutex
	next   time.Time // no line before this
	missed int       // times met since the last line
	// met is set while the condition lasts: from a Note to the next
	// Recovered. Read without the lock on every success.
	met atomic.Bool
}

// Note counts the condition met once at now, and reports whether to log a
// line now, with the times it speaks for.
func (l *Limiter) Note(now time.Time) (log bool, times int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.missed++
	l.met.Store(true)
	if now.Before(l.next) {
		return false, 0
	}
	n := l.missed
	l.missed, l.next = 0, now.Add(l.Every)
	return true, n
}

// Recovered is told of a success that shows the condition is over (a
// write that went through). The first time after the condition was met,
// it reports to log its end, with the times met since the last line —
// which would otherwise wait for the next outage's first line — and the
// next time the condition is met is logged at once. Cheap when nothing
// was met: one atomic load.
func (l *Limiter) Recovered() (log bool, times int) {
	if !l.met.Load() {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.met.Load() {
		return false, 0
	}
	l.met.Store(false)
	n := l.missed
	l.missed, l.next = 0, time.Time{}
	return true, n
}
