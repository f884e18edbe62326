package store

import (
	"context"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// The operator page's overview counts. Each query is plain SQL that SQLite
// and PostgreSQL read alike: GROUP BY, COUNT, MIN, CASE and integer
// division of BIGINT milliseconds, no dialect function.

// OrderCount is how many orders of a profile in one status.
type OrderCount struct {
	Profile string
	Status  acme.Status
	Count   int
}

// OrderCountsSince counts the orders created at or after since, by profile
// and status.
func (db *DB) OrderCountsSince(ctx context.Context, since time.Time) ([]OrderCount, error) {
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT profile, status, COUNT(*) FROM orders WHERE created_at >= ?
		GROUP BY profile, status ORDER BY profile, status`), since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: counting orders: %w", err)
	}
	defer rows.Close()
	var out []OrderCount
	for rows.Next() {
		var c OrderCount
		if err := rows.Scan(&c.Profile, &c.Status, &c.Count); err != nil {
			return nil, fmt.Errorf("store: counting orders: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// OldestReadyJobs returns, for each kind with a job waiting for a runner
// at now (ready and due), when the longest waiting of them fell due. A
// ready job due later is scheduled, not waiting: a periodic row, ready
// again after each round and as old as the first start, or a job in its
// backoff would otherwise count the whole time since it was created.
// CountJobs counts the ready jobs, due or not.
func (db *DB) OldestReadyJobs(ctx context.Context, now time.Time) (map[string]time.Time, error) {
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT kind, MIN(run_at) FROM jobs WHERE status = ? AND run_at <= ? GROUP BY kind`),
		JobReady, now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: reading the oldest waiting jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var (
			kind   string
			oldest int64
		)
		if err := rows.Scan(&kind, &oldest); err != nil {
			return nil, fmt.Errorf("store: reading the oldest waiting jobs: %w", err)
		}
		out[kind] = ms(oldest)
	}
	return out, rows.Err()
}

// EventHour is how many audit rows of an event one hour holds.
type EventHour struct {
	Event string
	Hour  time.Time // the hour's start, UTC
	Count int
}

// EventsPerHour counts the audit rows of the given events at or after
// since, by event and by hour (UTC), oldest hour first.
func (db *DB) EventsPerHour(ctx context.Context, since time.Time, events ...string) ([]EventHour, error) {
	if len(events) == 0 {
		return nil, nil
	}
	const hour = int64(time.Hour / time.Millisecond)
	in, args := "?", []any{events[0]}
	for _, e := range events[1:] {
		in += ", ?"
		args = append(args, e)
	}
	args = append(args, since.UnixMilli())
	rows, err := db.r.QueryContext(ctx, db.q(fmt.Sprintf(`SELECT event, at / %d, COUNT(*) FROM audit_events
		WHERE event IN (%s) AND at >= ? GROUP BY event, at / %d ORDER BY at / %d, event`, hour, in, hour, hour)), args...)
	if err != nil {
		return nil, fmt.Errorf("store: counting events: %w", err)
	}
	defer rows.Close()
	var out []EventHour
	for rows.Next() {
		var (
			e EventHour
			h int64
		)
		if err := rows.Scan(&e.Event, &h, &e.Count); err != nil {
			return nil, fmt.Errorf("store: counting events: %w", err)
		}
		e.Hour = ms(h * hour)
		out = append(out, e)
	}
	return out, rows.Err()
}
