package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
)

// ErrPruneUnfinished is the stop a prune's record is asked about while
// it runs: the row kept beside each batch (prune_progress) is the one
// the trail gets should its process end before the next, and
// RecordUnfinishedPrunes writes it then.
var ErrPruneUnfinished = errors.New("store: the prune's process ended before it finished")

// PruneHeartbeat is how often a prune under way moves the time of its
// progress row on, from its first batch's commit to its end: also while
// a batch runs, however long the database takes over it. The wait
// RecordUnfinishedPrunes is given (the audit sweep's 15 minutes) is many
// of these, so that only the row of a prune no process runs any more
// stands still that long, not that of a prune whose batch is slow.
const PruneHeartbeat = time.Minute

// pruneProgress is one prune's row in prune_progress: the audit row of
// what it deleted so far, for the trail should its process end, timed by
// the prune's clock (the wall clock when nil). Its prune calls stop
// before it returns, outside any transaction.
type pruneProgress struct {
	clock   clock.Clock
	id      string
	written bool
	// stopBeat ends the heartbeat and waits for it to return; nil
	// while none runs.
	stopBeat func()
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
	p.beat(ctx, db)
	return nil
}

// beat starts, once, the prune's heartbeat: every PruneHeartbeat of its
// clock, until stop, the row's time moves on to the clock's, in a write
// of its own. A beat the database refuses is not the prune's failure:
// the next beat, or the next batch, moves the row on. (On SQLite a beat
// waits for a batch holding the writer, as a sweep's write would.)
func (p *pruneProgress) beat(ctx context.Context, db *DB) {
	if p.stopBeat != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	id, clk := p.id, p.clock
	t := clk.NewTimer(PruneHeartbeat) // the first beat counts from the row's first write
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			now := clk.Now().UnixMilli()
			_, _ = db.wr.ExecContext(ctx, db.q(`UPDATE prune_progress SET updated_at = ? WHERE id = ? AND updated_at < ?`), now, id, now)
			t = clk.NewTimer(PruneHeartbeat)
		}
	}()
	p.stopBeat = func() { cancel(); <-done }
}

// stop ends the heartbeat, if one runs. Never inside a transaction of
// the store: on SQLite a beat may be waiting for it.
func (p *pruneProgress) stop() {
	if p.stopBeat != nil {
		p.stopBeat()
		p.stopBeat = nil
	}
}

// keep rewrites, in a write of its own, the progress row with ev: the
// row of the prune's stop, which the database refused to write to the
// trail. RecordUnfinishedPrunes writes it there once it stood still, in
// place of the row saying the prune's process ended, which it is not.
func (p *pruneProgress) keep(ctx context.Context, db *DB, ev AuditEvent) error {
	if !p.written {
		return errors.New("the prune has no progress row")
	}
	ev.Jobs = nil
	row, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	res, err := db.wr.ExecContext(ctx, db.q(`UPDATE prune_progress SET audit_row = ?, updated_at = ? WHERE id = ?`),
		string(row), p.now().UnixMilli(), p.id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(errors.New("its progress row is gone"), err)
	}
	return nil
}

// refusedStops are the rows of the prunes of a store in this process
// that stopped part way and whose row of that the database refused, both
// in the trail and in their progress row (keep), by their progress row's
// id: the store's next RecordUnfinishedPrunes writes each in place of
// its progress row's, which says the process ended, as soon as it can.
// (Another instance's sweep that comes first, or one after a reload that
// opened the store anew, still writes the progress row's.)
type refusedStops struct {
	mu   sync.Mutex
	rows map[string]AuditEvent
}

// rememberStop keeps ev, the refused row of p's prune's stop, for this
// process's next RecordUnfinishedPrunes.
func (p *pruneProgress) rememberStop(db *DB, ev AuditEvent) {
	if !p.written {
		return
	}
	db.refusedStops.mu.Lock()
	defer db.refusedStops.mu.Unlock()
	if db.refusedStops.rows == nil {
		db.refusedStops.rows = map[string]AuditEvent{}
	}
	db.refusedStops.rows[p.id] = ev
}

// recordRefusedStops writes the refused rows of the stopped prunes of db
// (refusedStops), each with the deletion of its progress
// row, stale or not: their prunes are known to have stopped. A row whose
// progress row is gone (another instance recorded the prune) is
// forgotten. It returns how many it wrote.
func (db *DB) recordRefusedStops(ctx context.Context) (int, error) {
	db.refusedStops.mu.Lock()
	type refused struct {
		id string
		ev AuditEvent
	}
	var of []refused
	for id, ev := range db.refusedStops.rows {
		of = append(of, refused{id, ev})
	}
	db.refusedStops.mu.Unlock()
	n := 0
	for _, r := range of {
		wrote := false
		err := db.withTx(ctx, func(tx *sql.Tx) error {
			wrote = false // fn may run again (see engine)
			res, err := tx.ExecContext(ctx, db.q(`DELETE FROM prune_progress WHERE id = ?`), r.id)
			if err != nil {
				return err
			}
			if k, err := res.RowsAffected(); err != nil || k == 0 {
				return err
			}
			wrote = true
			return db.insertAudit(ctx, tx, r.ev)
		})
		if err != nil {
			return n, fmt.Errorf("store: recording stopped prune %s: %w", r.id, err)
		}
		db.refusedStops.mu.Lock()
		delete(db.refusedStops.rows, r.id)
		db.refusedStops.mu.Unlock()
		if wrote {
			n++
		}
	}
	return n, nil
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
// whose process ended part way — its progress row last moved on before
// staleBefore, which a prune running does with every batch and every
// PruneHeartbeat — and returns how many it wrote. Each is written once,
// with its progress row deleted in the same transaction, and only if
// the row still stood still before staleBefore then: however many
// instances look at once, and whatever the prune did since it was read.
// The row of a prune that stopped, but whose row of its stop the
// database refused, says so, not that its process ended: its progress
// row holds it (see recordStopped), or, when the database refused that
// too, this store does, and writes it first, at once.
func (db *DB) RecordUnfinishedPrunes(ctx context.Context, staleBefore time.Time) (int, error) {
	n, err := db.recordRefusedStops(ctx)
	if err != nil {
		return n, err
	}
	var found []string
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT id FROM prune_progress WHERE updated_at < ?`), staleBefore.UnixMilli())
	if err != nil {
		return n, fmt.Errorf("store: reading unfinished prunes: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return n, fmt.Errorf("store: reading unfinished prunes: %w", err)
		}
		found = append(found, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("store: reading unfinished prunes: %w", err)
	}
	for _, id := range found {
		wrote := false
		err := db.withTx(ctx, func(tx *sql.Tx) error {
			wrote = false // fn may run again (see engine)
			var row string
			switch err := tx.QueryRowContext(ctx, db.q(`DELETE FROM prune_progress WHERE id = ? AND updated_at < ? RETURNING audit_row`),
				id, staleBefore.UnixMilli()).Scan(&row); {
			case errors.Is(err, sql.ErrNoRows):
				return nil // recorded meanwhile, or the prune went on after all
			case err != nil:
				return err
			}
			var ev AuditEvent
			if err := json.Unmarshal([]byte(row), &ev); err != nil {
				return fmt.Errorf("reading its row: %w", err)
			}
			wrote = true
			return db.insertAudit(ctx, tx, ev)
		})
		if err != nil {
			return n, fmt.Errorf("store: recording unfinished prune %s: %w", id, err)
		}
		if wrote {
			n++
		}
	}
	return n, nil
}
