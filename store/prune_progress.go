package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
)

// ErrPruneUnfinished is the stop a prune's record is asked about while
// it runs: the row kept beside each batch (prune_progress) is the one
// the trail gets should its process end before the next, and
// RecordUnfinishedPrunes writes it then.
var ErrPruneUnfinished = errors.New("store: the prune's process ended before it finished")

// ClockAt is a clock that reads now when it is made and moves on from
// there by the wall clock's monotonic reading (as ReadServerClock takes
// its midpoint); its timers are the wall clock's. A prune whose caller is
// handed a time rather than a clock (a sweep) times its progress row by
// it: the caller's time, moved on by the time the prune took. A zero now
// gives the wall clock.
func ClockAt(now time.Time) clock.Clock {
	if now.IsZero() {
		return clock.Real()
	}
	return clockAt{at: now, began: time.Now()}
}

type clockAt struct{ at, began time.Time }

func (c clockAt) Now() time.Time                       { return c.at.Add(time.Since(c.began)) }
func (c clockAt) NewTimer(d time.Duration) clock.Timer { return clock.Real().NewTimer(d) }

// pruneProgress is one prune's row in prune_progress: the audit row of
// what it deleted so far, for the trail should its process end, timed by
// the prune's clock (the wall clock when nil).
type pruneProgress struct {
	clock   clock.Clock
	id      string
	written bool
}

// now is the prune's clock's time.
func (p *pruneProgress) now() time.Time {
	if p.clock == nil {
		p.clock = clock.Real()
	}
	return p.clock.Now()
}

// note rewrites, in tx of a batch, the prune's audit row as it stands
// with that batch, so that the batch and the row saying it was deleted
// commit together.
func (p *pruneProgress) note(ctx context.Context, db *DB, tx *sql.Tx, ev AuditEvent) error {
	if p.id == "" {
		p.id = NewID()
	}
	ev.Jobs = nil
	row, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO prune_progress (id, updated_at, audit_row) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, audit_row = excluded.audit_row`),
		p.id, p.now().UnixMilli(), string(row)); err != nil {
		return err
	}
	p.written = true
	return nil
}

// end deletes, in tx of the row recording the prune, its progress row.
func (p *pruneProgress) end(ctx context.Context, db *DB, tx *sql.Tx) error {
	if !p.written {
		return nil
	}
	_, err := tx.ExecContext(ctx, db.q(`DELETE FROM prune_progress WHERE id = ?`), p.id)
	return err
}

// RecordUnfinishedPrunes writes to the audit trail the row of each prune
// whose process ended between two batches — its progress row last
// rewritten before staleBefore, which a prune running rewrites with
// every batch — and returns how many it wrote. Each is written once,
// with its progress row deleted in the same transaction, however many
// instances look at once.
func (db *DB) RecordUnfinishedPrunes(ctx context.Context, staleBefore time.Time) (int, error) {
	type stale struct {
		id  string
		at  int64
		row string
	}
	var found []stale
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT id, updated_at, audit_row FROM prune_progress WHERE updated_at < ?`), staleBefore.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("store: reading unfinished prunes: %w", err)
	}
	for rows.Next() {
		var s stale
		if err := rows.Scan(&s.id, &s.at, &s.row); err != nil {
			rows.Close()
			return 0, fmt.Errorf("store: reading unfinished prunes: %w", err)
		}
		found = append(found, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("store: reading unfinished prunes: %w", err)
	}
	n := 0
	for _, s := range found {
		var ev AuditEvent
		if err := json.Unmarshal([]byte(s.row), &ev); err != nil {
			return n, fmt.Errorf("store: reading unfinished prune %s: %w", s.id, err)
		}
		wrote := false
		err := db.withTx(ctx, func(tx *sql.Tx) error {
			wrote = false // fn may run again (see engine)
			res, err := tx.ExecContext(ctx, db.q(`DELETE FROM prune_progress WHERE id = ? AND updated_at = ?`), s.id, s.at)
			if err != nil {
				return err
			}
			if k, err := res.RowsAffected(); err != nil || k == 0 {
				return err // recorded meanwhile, or the prune went on after all
			}
			wrote = true
			return db.insertAudit(ctx, tx, ev)
		})
		if err != nil {
			return n, fmt.Errorf("store: recording unfinished prune %s: %w", s.id, err)
		}
		if wrote {
			n++
		}
	}
	return n, nil
}
