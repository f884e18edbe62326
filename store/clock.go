package store

import (
	"context"
	"fmt"
	"time"
)

// ClockReading is one comparison of an instance's clock with the
// database server's.
type ClockReading struct {
	// Local is the instance's clock at the midpoint of the round trip.
	Local time.Time
	// Server is the server's clock as it answered, within the round trip.
	Server time.Time
	// RoundTrip is how long the query took: Server was read somewhere
	// within it, so Skew is right to within half of it.
	RoundTrip time.Duration
}

// Skew is how far the instance's clock runs ahead of the server's
// (negative: behind).
func (c ClockReading) Skew() time.Duration { return c.Local.Sub(c.Server) }

// ReadServerClock reads the database server's clock and compares it with
// now, the instance's: the local time is taken at the midpoint of the
// round trip (its start on now, plus half of it as measured by the
// monotonic clock, so that a clock that does not move in a test still
// gets its midpoint). Several instances share a PostgreSQL database and
// write the job leases each in its own clock; the server's clock is the
// one they all can compare with. ok is false where there is no server to
// compare with (SQLite, in this process).
func (db *DB) ReadServerClock(ctx context.Context, now func() time.Time) (reading ClockReading, ok bool, err error) {
	stmt := db.dialect.serverClock()
	if stmt == "" {
		return ClockReading{}, false, nil
	}
	start, began := now(), time.Now()
	var server time.Time
	if err := db.r.QueryRowContext(ctx, stmt).Scan(&server); err != nil {
		return ClockReading{}, false, fmt.Errorf("store: reading the database server's clock: %w", err)
	}
	rtt := time.Since(began)
	return ClockReading{Local: start.Add(rtt / 2), Server: server, RoundTrip: rtt}, true, nil
}
