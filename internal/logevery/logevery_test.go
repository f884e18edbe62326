package logevery

import (
	"testing"
	"time"
)

func TestAConditionIsLoggedFirstThenOnceAnIntervalWithTheTimesItWasMet(t *testing.T) {
	l := Limiter{Every: time.Minute}
	t0 := time.Now()
	steps := []struct {
		at        time.Duration
		log       bool
		wantTimes int
	}{
		{0, true, 1},
		{time.Second, false, 0},
		{30 * time.Second, false, 0},
		{time.Minute, true, 3},
		{time.Minute + time.Second, false, 0},
		{3 * time.Minute, true, 2},
	}
	for _, s := range steps {
		log, n := l.Note(t0.Add(s.at))
		if log != s.log || n != s.wantTimes {
			t.Errorf("at %v: Note = %v, %d; want %v, %d", s.at, log, n, s.log, s.wantTimes)
		}
	}
}

// The end of a condition is logged once, with the times it was met since
// the last line, and the next time it is met is logged at once.
func TestTheEndOfAConditionIsLoggedOnceWithTheTimesNotYetLogged(t *testing.T) {
	l := Limiter{Every: time.Minute}
	t0 := time.Now()
	if log, _ := l.Recovered(); log {
		t.Error("Recovered logged the end of a condition never met")
	}
	l.Note(t0)
	l.Note(t0.Add(time.Second))
	l.Note(t0.Add(2 * time.Second))
	if log, n := l.Recovered(); !log || n != 2 {
		t.Errorf("Recovered after three (one logged) = %v, %d; want true, 2", log, n)
	}
	if log, _ := l.Recovered(); log {
		t.Error("Recovered logged the same end twice")
	}
	if log, n := l.Note(t0.Add(3 * time.Second)); !log || n != 1 {
		t.Errorf("Note of the next outage, within the interval of the last line = %v, %d; want logged at once, 1", log, n)
	}
}
