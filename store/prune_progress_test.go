package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
)

// killedPrune runs a prune in batches of 3 over the rows of
// oldRowsTheSecondBatchFailsOn, timed by clk, whose process ends after
// its first batch: where it would write the row of its stop. It leaves
// the progress row of the 3 rows it deleted.
func killedPrune(t *testing.T, db *DB, clk *clocktest.Fake) {
	t.Helper()
	cutoff := oldRowsTheSecondBatchFailsOn(t, db)
	defer func() { _ = recover() }()
	_, _ = db.PruneAudit(t.Context(), cutoff, 3, clk, func(deleted int64, stopped error) (AuditEvent, bool) {
		if !errors.Is(stopped, ErrPruneUnfinished) {
			panic("the process ends")
		}
		return AuditEvent{At: clk.Now(), Event: "audit_pruned", Outcome: "interrupted", ActorKind: "admin",
			Detail: fmt.Sprintf("deleted %d, unfinished", deleted)}, true
	})
}

// A prune's progress is timed by the clock it is given — the clock the
// sweep that looks at it reads too — not by the wall clock of the
// process: a prune timed at t0 that stood still is found by a sweep at
// t0 plus the wait, and not before.
func TestAPrunesProgressIsTimedByTheClockItIsGiven(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		clk := clocktest.New(t0)
		killedPrune(t, db, clk)

		for _, step := range []struct {
			name  string
			after time.Duration // since the prune's batch, in its clock
			want  int
		}{
			{"stood still for 14 of 15 minutes", 14 * time.Minute, 0},
			{"stood still for 16 of 15 minutes", 16 * time.Minute, 1},
		} {
			n, err := db.RecordUnfinishedPrunes(ctx, t0.Add(step.after).Add(-15*time.Minute))
			if err != nil || n != step.want {
				t.Errorf("%s: recorded %d (%v); want %d", step.name, n, err, step.want)
			}
		}
	})
}

// A prune whose batch takes longer than the sweep's wait (a slow
// database) still runs: the sweep that looks meanwhile, on any instance,
// does not take it for ended and write its row, and the trail gets the
// one row of the prune, which ran to the end. On SQLite the batch holds
// the writer, which the sweep's write waits for; on PostgreSQL the sweep
// runs at once, and finds the prune's row moved on while the batch runs.
func TestAPruneWhoseBatchOutlastsTheSweepsWaitIsNotTakenForEnded(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := t.Context()
		db := openTest(t)
		clk := clocktest.New(t0)
		cutoff := t0.Add(30 * 24 * time.Hour)
		var old []time.Time
		for i := range 7 {
			old = append(old, cutoff.Add(-time.Duration(i+1)*time.Hour))
		}
		auditAt(t, db, old...)

		// The second batch is held inside its transaction until
		// released: a DELETE the database takes 16 minutes over.
		held, release := make(chan struct{}), make(chan struct{})
		calls := 0
		type result struct {
			n   int64
			err error
		}
		pruned := make(chan result, 1)
		go func() {
			n, err := db.PruneAudit(ctx, cutoff, 3, clk, func(deleted int64, stopped error) (AuditEvent, bool) {
				if calls++; calls == 2 {
					close(held)
					<-release
				}
				outcome := "success"
				if stopped != nil {
					outcome = "interrupted"
				}
				return AuditEvent{At: cutoff.Add(time.Hour), Event: "audit_pruned", Outcome: outcome, ActorKind: "admin",
					Detail: fmt.Sprintf("deleted %d", deleted)}, true
			})
			pruned <- result{n, err}
		}()
		<-held
		clk.Advance(16 * time.Minute)
		atOnce := dialectOf(t).name == "postgres" // the sweep's write runs at once
		if atOnce {
			// The prune's heartbeat has written and waits for its next
			// (bounded, so that a prune without one fails below rather
			// than hangs here).
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := clk.NextTimer(wait)
			cancel()
			if err != nil {
				t.Errorf("the prune waits for nothing while its batch runs: %v", err)
			}
		}
		swept := make(chan result, 1)
		go func() {
			n, err := db.RecordUnfinishedPrunes(ctx, clk.Now().Add(-15*time.Minute))
			swept <- result{int64(n), err}
		}()
		var sweep result
		if atOnce {
			sweep = <-swept
		}
		close(release)
		prune := <-pruned
		if !atOnce {
			sweep = <-swept
		}
		if sweep.err != nil || sweep.n != 0 {
			t.Errorf("the sweep while the batch ran recorded %d (%v); want none: the prune still ran", sweep.n, sweep.err)
		}
		if prune.err != nil || prune.n != 7 {
			t.Errorf("the prune: %d deleted, %v; want 7", prune.n, prune.err)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{Event: "audit_pruned"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Outcome != "success" || rows[0].Detail != "deleted 7" {
			t.Errorf("the trail's rows of the prune: %+v; want one, success, of the 7 deleted", rows)
		}
	})
}

// A prune that stops part way (here a batch failed) and whose row of
// that stop the database refuses too is not written up later as a prune
// whose process ended: the trail gets the row of its stop, saying why it
// stopped, once the database takes writes again — from its progress row
// when the database took that write, else from this process, whose next
// look at unfinished prunes writes it.
func TestAPruneWhoseRowOfItsStopWasRefusedIsRecordedAsStoppedNotAsEnded(t *testing.T) {
	refuse := map[string]map[string][]string{
		"the row refused": {
			"sqlite": {`CREATE TRIGGER refuse_stop BEFORE INSERT ON audit_events WHEN NEW.event = 'audit_pruned'
				BEGIN SELECT RAISE(ABORT, 'refused'); END`},
			"postgres": {`CREATE FUNCTION refuse_stop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
					RAISE EXCEPTION 'refused'; END $$`,
				`CREATE TRIGGER refuse_stop BEFORE INSERT ON audit_events FOR EACH ROW WHEN (NEW.event = 'audit_pruned')
					EXECUTE FUNCTION refuse_stop()`},
		},
		"every write refused": {
			"sqlite": {`CREATE TRIGGER refuse_stop BEFORE INSERT ON audit_events WHEN NEW.event = 'audit_pruned'
				BEGIN SELECT RAISE(ABORT, 'refused'); END`,
				`CREATE TRIGGER refuse_progress BEFORE UPDATE ON prune_progress BEGIN SELECT RAISE(ABORT, 'refused'); END`},
			"postgres": {`CREATE FUNCTION refuse_stop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
					RAISE EXCEPTION 'refused'; END $$`,
				`CREATE TRIGGER refuse_stop BEFORE INSERT ON audit_events FOR EACH ROW WHEN (NEW.event = 'audit_pruned')
					EXECUTE FUNCTION refuse_stop()`,
				`CREATE TRIGGER refuse_progress BEFORE UPDATE ON prune_progress FOR EACH ROW EXECUTE FUNCTION refuse_stop()`},
		},
	}
	allow := map[string][]string{
		"sqlite":   {`DROP TRIGGER refuse_stop`, `DROP TRIGGER IF EXISTS refuse_progress`},
		"postgres": {`DROP TRIGGER refuse_stop ON audit_events`, `DROP TRIGGER IF EXISTS refuse_progress ON prune_progress`},
	}
	for _, name := range []string{"the row refused", "every write refused"} {
		t.Run(name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx := t.Context()
				db := openTest(t)
				clk := clocktest.New(t0)
				cutoff := oldRowsTheSecondBatchFailsOn(t, db)
				refuseWith(t, db, refuse[name])
				n, err := db.PruneAudit(ctx, cutoff, 3, clk, func(deleted int64, stopped error) (AuditEvent, bool) {
					why := "a batch failed"
					if errors.Is(stopped, ErrPruneUnfinished) {
						why = "its process ended"
					}
					return AuditEvent{At: cutoff, Event: "audit_pruned", Outcome: "interrupted", ActorKind: "admin",
						Detail: fmt.Sprintf("deleted %d, stopped: %s", deleted, why)}, true
				})
				if err == nil || n != 3 || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("PruneAudit: %d, %v; want the first batch's 3 deleted, and its row refused", n, err)
				}

				// The database takes writes again; the next audit sweep
				// looks, past the wait.
				refuseWith(t, db, allow)
				if n, err := db.RecordUnfinishedPrunes(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
					t.Errorf("the sweep recorded %d (%v); want the stopped prune's row", n, err)
				}
				rows, err := db.SearchAudit(ctx, AuditFilter{Event: "audit_pruned"})
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) != 1 || rows[0].Detail != "deleted 3, stopped: a batch failed" {
					t.Errorf("the trail's rows of the prune: %+v; want one, of the 3 deleted, saying a batch failed", rows)
				}
			})
		})
	}
}
