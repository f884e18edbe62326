package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// TestTheRunnersStatementsReadOnlyTheJobsTheyTake runs what a runner and
// an operator's cancel do to the jobs table — enqueue, cancel, the poll's
// read, the claim (which takes owed Abandons too), renewals, settling
// writes, the next due time — and asks SQLite for the plan of each: none
// may read every job of a kind, settled ones included, which is what an
// index on the kind alone would do, nor every cancelled one of a kind
// to find those still owing their Abandon. They run several times a second per
// kind, however many settled jobs the table holds.
func TestTheRunnersStatementsReadOnlyTheJobsTheyTake(t *testing.T) {
	ctx := context.Background()
	db, ran := openRecording(t)
	t0 := time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)
	j, _, err := db.EnqueueJob(ctx, store.NewJob{Kind: "k", MaxAttempts: 3, RunAt: t0.Add(time.Hour)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CancelJob(ctx, j.ID, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AnyJobDue(ctx, "k", []string{"l"}, "a", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.NextJobDue(ctx, []string{"k"}, []string{"l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimJobsIn(ctx, "k", []string{"l"}, "a", t0, t0.Add(time.Minute), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExtendJobLeases(ctx, "k", "a", t0.Add(2*time.Minute), t0); err != nil {
		t.Fatal(err)
	}
	if err := db.ReleaseJob(ctx, j.ID, "a", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ClaimJobsIn(ctx, "k", []string{"l"}, "a", t0, t0.Add(time.Minute), 10); err != nil {
		t.Fatal(err)
	}
	if err := db.SettleJobAbandon(ctx, j.ID, "a", t0); err != nil {
		t.Fatal(err)
	}

	explained := 0
	for _, stmt := range ran() {
		line := oneLine(stmt)
		if store.IsMigrationStatement(stmt) || !strings.Contains(line, "jobs") || strings.HasPrefix(line, "INSERT INTO") {
			continue
		}
		plan, ok, err := store.QueryPlan(ctx, db, stmt)
		if err != nil {
			t.Fatalf("EXPLAIN QUERY PLAN %s: %v", stmt, err)
		}
		if !ok {
			continue
		}
		explained++
		// The jobs owing their Abandon are found by their partial index,
		// not among every cancelled job of the kind (jobs_due by kind
		// and status: the history of cancels, until pruned).
		if strings.Contains(line, "abandon_owed = 1") && !strings.Contains(line, "WHERE id = ?") && !strings.Contains(strings.Join(plan, "; "), "INDEX jobs_abandon_owed ") {
			t.Errorf("finds the jobs owing their Abandon without their index:\n%s\nplan: %s", line, strings.Join(plan, "; "))
		}
		var subqueries []string
		for _, step := range plan {
			if name, ok := strings.CutPrefix(step, "CO-ROUTINE "); ok {
				subqueries = append(subqueries, name)
			}
		}
		for _, step := range plan {
			if table, all := everyRowOf(step, subqueries); all {
				t.Errorf("reads every row of %s (%s):\n%s\nplan: %s", table, step, line, strings.Join(plan, "; "))
			}
		}
	}
	if explained < 7 {
		t.Errorf("explained %d statements; want every one the runner ran (at least 7)", explained)
	}
}
