package store

import (
	"context"
	"errors"
	"fmt"
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
