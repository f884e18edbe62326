package store

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
)

// An operator's retry revives a failed job that the sweep is about to
// prune: on PostgreSQL (READ COMMITTED) the sweep's pick of old settled
// rows is taken before the revival commits, and its DELETE, waiting on
// the row, must not then delete the job the operator revived.
func TestAPruneDoesNotDeleteAJobRevivedWhileItRan(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		place := newPlace(t)
		db := openAt(t, place)
		j, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1}, t0)
		if _, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1); err != nil {
			t.Fatal(err)
		}
		if err := db.RetireJob(ctx, j.ID, "a", JobFailed, "gave up", t0); err != nil {
			t.Fatal(err)
		}
		raw, err := sql.Open("pgx", place)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		// The revival, uncommitted: RetryJobNow's effect on the row.
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'ready', finished_at = NULL, attempts = 0 WHERE id = $1`, j.ID); err != nil {
			t.Fatal(err)
		}
		pruned := make(chan error, 1)
		go func() {
			_, err := db.PruneJobs(ctx, t0.Add(24*time.Hour))
			pruned <- err
		}()
		for waiting := false; !waiting; {
			var n int
			if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM jobs%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			waiting = n > 0
			time.Sleep(5 * time.Millisecond)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-pruned; err != nil {
			t.Fatal(err)
		}
		got, err := db.GetJob(ctx, j.ID)
		if errors.Is(err, ErrNotFound) {
			t.Fatal("the sweep deleted the job revived while it ran")
		}
		if err != nil || got.Status != JobReady {
			t.Fatalf("job: %+v, %v; want ready", got, err)
		}
	})
}

// A client of another instance spends a bucket the rate limit sweep has
// just picked as full again: on PostgreSQL (READ COMMITTED) the sweep's
// pick is taken before the spend commits, and its DELETE, waiting on the
// row, must not then delete the spend (a fresh burst for the client).
func TestAPruneDoesNotDeleteABucketSpentWhileItRan(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		place := newPlace(t)
		db := openAt(t, place)
		b := LimitSpend{Key: "orders_per_account/p/acct", Emission: time.Minute, Burst: 3, Cost: 1}
		if _, ok, err := db.SpendLimits(ctx, []LimitSpend{b}, t0); err != nil || !ok {
			t.Fatalf("the first spend: %v, %v", ok, err)
		}
		now := t0.Add(time.Hour) // the bucket is full again
		raw, err := sql.Open("pgx", place)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		// The other instance's burst, uncommitted: the bucket emptied at now.
		if _, err := tx.ExecContext(ctx, `UPDATE rate_limits SET tat_ns = $1 WHERE key = $2`,
			now.Add(3*time.Minute).UnixNano(), b.Key); err != nil {
			t.Fatal(err)
		}
		pruned := make(chan error, 1)
		go func() {
			_, err := db.PruneLimits(ctx, now, 0)
			pruned <- err
		}()
		for waiting := false; !waiting; {
			var n int
			if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM rate_limits%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			waiting = n > 0
			time.Sleep(5 * time.Millisecond)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-pruned; err != nil {
			t.Fatal(err)
		}
		if out, ok, err := db.SpendLimits(ctx, []LimitSpend{b}, now); err != nil || ok {
			t.Fatalf("a spend of the bucket emptied while the sweep ran: %+v, %v, %v; want it denied", out, ok, err)
		}
	})
}
