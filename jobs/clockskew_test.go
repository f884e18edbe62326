package jobs

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// skewedClock reads the wall clock (which the test's PostgreSQL server,
// on this machine, shares) moved by an offset the test sets.
type skewedClock struct {
	*clocktest.Fake // timers: the runner's loop sleeps on them
	offset          atomic.Int64
}

func newSkewedClock(offset time.Duration) *skewedClock {
	c := &skewedClock{Fake: clocktest.New(time.Now())}
	c.offset.Store(int64(offset))
	return c
}

func (c *skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

var _ clock.Clock = (*skewedClock)(nil)

// readings records what a runner tells OnClockReading.
type readings struct {
	mu  sync.Mutex
	all []store.ClockReading
}

func (r *readings) add(c store.ClockReading) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, c)
}

func (r *readings) get() []store.ClockReading {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.ClockReading(nil), r.all...)
}

// postgresOnly runs body under the PostgreSQL dialect: only a database
// with a server of its own has a clock to compare with.
func postgresOnly(t *testing.T, body func(t *testing.T)) { t.Run("postgres", body) }

// A runner on PostgreSQL compares its clock with the database server's
// as it starts: a skew beyond the threshold is logged as clock_skew,
// naming both times and the skew, and every skew measured is reported;
// a clock in step, or skewed less than the threshold, logs nothing.
func TestAClockSkewedFromTheDatabaseServersIsLoggedAtStartAndMeasured(t *testing.T) {
	tests := []struct {
		name     string
		skew     time.Duration
		wantLine bool
	}{
		{name: "warn/ahead by 30s", skew: 30 * time.Second, wantLine: true},
		{name: "warn/behind by 30s", skew: -30 * time.Second, wantLine: true},
		{name: "ok/in step", skew: 0, wantLine: false},
		{name: "ok/ahead by 3s, under the threshold", skew: 3 * time.Second, wantLine: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			postgresOnly(t, func(t *testing.T) {
				db := openDB(t, "")
				core, logs := observer.New(zap.InfoLevel)
				var got readings
				startRunner(t, NewQueue(db, nil), RunnerOptions{Clock: newSkewedClock(tt.skew), Logger: zap.New(core),
					ClockSkewWarn: 10 * time.Second, OnClockReading: got.add}, newFuncHandler("k", nil))
				rs := got.get()
				if len(rs) != 1 {
					t.Fatalf("%d clock readings at start; want 1", len(rs))
				}
				margin := rs[0].RoundTrip/2 + time.Second
				if d := rs[0].Skew() - tt.skew; d.Abs() > margin {
					t.Errorf("measured skew %v; want %v within %v", rs[0].Skew(), tt.skew, margin)
				}
				lines := logs.FilterField(zap.String("event", "clock_skew")).All()
				if got := len(lines) == 1; got != tt.wantLine {
					t.Fatalf("%d clock_skew lines; want a line: %v", len(lines), tt.wantLine)
				}
				if !tt.wantLine {
					return
				}
				l := lines[0]
				if l.Level != zapcore.WarnLevel {
					t.Errorf("clock_skew logged at %v; want warn", l.Level)
				}
				f := l.ContextMap()
				for _, k := range []string{"clock", "database_clock", "skew", "database"} {
					if _, ok := f[k]; !ok {
						t.Errorf("the clock_skew line lacks %q: %v", k, f)
					}
				}
				if s, _ := f["skew"].(time.Duration); (s - tt.skew).Abs() > margin {
					t.Errorf("the line's skew is %v; want %v", f["skew"], tt.skew)
				}
			})
		})
	}
}

// While the runner runs it compares the clocks again every
// ClockCheckEvery; a skew that lasts is logged at most once every
// clockSkewLogEvery (on the runner's clock), and its end once.
func TestALastingClockSkewIsCheckedEveryIntervalAndLoggedOnceAnInterval(t *testing.T) {
	postgresOnly(t, func(t *testing.T) {
		db := openDB(t, "")
		core, logs := observer.New(zap.InfoLevel)
		clk := newSkewedClock(30 * time.Second)
		var got readings
		startRunner(t, NewQueue(db, nil), RunnerOptions{Clock: clk, Logger: zap.New(core), ClockCheckEvery: 10 * time.Millisecond,
			OnClockReading: got.add}, newFuncHandler("k", nil))
		lines := func(event string) int { return logs.FilterField(zap.String("event", event)).Len() }
		// skewTo sets the clock's skew (the wall clock, which the server
		// shares, runs on) and waits for a reading that saw it.
		skewTo := func(skew time.Duration) {
			t.Helper()
			clk.offset.Store(int64(skew))
			n := len(got.get())
			waitFor(t, "a reading of the new skew", func() bool {
				rs := got.get()
				for _, r := range rs[n:] {
					if (r.Skew() - skew).Abs() < r.RoundTrip/2+time.Second {
						return true
					}
				}
				return false
			})
		}
		skewTo(30*time.Second + time.Minute) // a minute on, as a clock keeping its skew
		if n := lines("clock_skew"); n != 1 {
			t.Errorf("%d clock_skew lines for readings within the log interval; want 1", n)
		}
		skewTo(30*time.Second + time.Minute + clockSkewLogEvery)
		if n := lines("clock_skew"); n != 2 {
			t.Errorf("%d clock_skew lines once the log interval passed; want 2", n)
		}
		skewTo(0)
		skewTo(time.Second) // a reading more, still in step
		if n := lines("clock_skew_recovered"); n != 1 {
			t.Errorf("%d clock_skew_recovered lines once in step; want 1", n)
		}
	})
}

// On SQLite there is no server clock: the runner compares nothing,
// however its clock runs.
func TestARunnerOnSQLiteComparesNoClock(t *testing.T) {
	db := openDB(t, "") // SQLite, outside eachDialect
	core, logs := observer.New(zap.InfoLevel)
	var got readings
	startRunner(t, NewQueue(db, nil), RunnerOptions{Clock: newSkewedClock(time.Hour), Logger: zap.New(core),
		OnClockReading: got.add}, newFuncHandler("k", nil))
	if n := len(got.get()); n != 0 {
		t.Errorf("%d clock readings on SQLite; want none", n)
	}
	if n := logs.FilterField(zap.String("event", "clock_skew")).Len(); n != 0 {
		t.Errorf("%d clock_skew lines on SQLite; want none", n)
	}
}
