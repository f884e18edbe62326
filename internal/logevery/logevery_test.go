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
