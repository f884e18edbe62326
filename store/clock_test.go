package store

import (
	"context"
	"testing"
	"time"
)

// PostgreSQL's clock is read within the query's round trip and compared
// with the midpoint of it on the caller's clock (which here stands still,
// as a test's fake clock does, and runs a day ahead); SQLite, in this
// process, has no clock of its own to compare with.
func TestTheServersClockIsComparedWithTheMidpointOfTheRoundTrip(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		defer db.Close()
		ahead := time.Now().Add(24 * time.Hour)
		before := time.Now()
		c, ok, err := db.ReadServerClock(context.Background(), func() time.Time { return ahead })
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if want := dialectOf(t).name == "postgres"; ok != want {
			t.Fatalf("a reading: %v; want %v", ok, want)
		}
		if !ok {
			return
		}
		if c.RoundTrip <= 0 || c.RoundTrip > after.Sub(before) {
			t.Errorf("round trip %v; want within the call's %v", c.RoundTrip, after.Sub(before))
		}
		if want := ahead.Add(c.RoundTrip / 2); !c.Local.Equal(want) {
			t.Errorf("local time %v; want the midpoint %v", c.Local, want)
		}
		// The server shares this machine's clock; timestamptz keeps
		// microseconds.
		if c.Server.Before(before.Truncate(time.Microsecond)) || c.Server.After(after) {
			t.Errorf("server time %v; want within the call, %v to %v", c.Server, before, after)
		}
		if got, want := c.Skew(), c.Local.Sub(c.Server); got != want || got < 23*time.Hour {
			t.Errorf("skew %v; want the local time less the server's, about a day", got)
		}
	})
}
