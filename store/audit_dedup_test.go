package store

import (
	"context"
	"testing"
	"time"
)

// A row written with a dedup key a stored row has already is not written
// again, nor are its notification jobs, and the write still succeeds: a
// retired job's Abandon, run a second time (after a crash before its
// retirement was recorded), records its event once. Rows without a key,
// and rows with other keys, are written as ever.
func TestAnAuditRowWithADedupKeyIsWrittenOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		row := func(key, order string) AuditEvent {
			return AuditEvent{At: t0, Event: "revocation_failed", Outcome: "failure", Profile: "p", OrderID: order, DedupKey: key,
				Jobs: []NewJob{{Kind: "notify_deliver", Payload: []byte(`{}`), MaxAttempts: 1}}}
		}
		for i, ev := range []AuditEvent{
			row("job/1/0", "o1"), row("job/1/0", "o1"), // the same retirement, twice
			row("job/1/1", "o1"),         // the job revived, retired again
			row("job/2/0", "o2"),         // another job
			row("", "o3"), row("", "o3"), // no key: every write a row
		} {
			if err := db.InsertAudit(ctx, ev); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		for order, want := range map[string]int{"o1": 2, "o2": 1, "o3": 2} {
			rows, err := db.SearchAudit(ctx, AuditFilter{OrderID: order})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != want {
				t.Errorf("order %s: %d rows, want %d", order, len(rows), want)
			}
		}
		js, err := db.ListJobs(ctx, JobFilter{Kind: "notify_deliver"})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) != 5 {
			t.Errorf("%d notification jobs queued, want 5 (one per row written)", len(js))
		}
	})
}

// An operator's revival of a retired job is counted on it, so that its
// next retirement is told apart from the last; a retry that only skips a
// waiting job's backoff is not a revival.
func TestRevivingARetiredJobCountsTheRevival(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1, RunAt: t0.Add(time.Hour)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if j.Revivals != 0 {
			t.Fatalf("a new job has %d revivals", j.Revivals)
		}
		steps := []struct {
			name string
			do   func() error
			want int
		}{
			{"ok/a waiting job's backoff skipped", func() error { _, err := db.RetryJobNow(ctx, j.ID, t0); return err }, 0},
			{"ok/a failed job revived", func() error {
				if _, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1); err != nil {
					return err
				}
				if err := db.RetireJob(ctx, j.ID, "a", JobFailed, "no", t0); err != nil {
					return err
				}
				_, err := db.RetryJobNow(ctx, j.ID, t0)
				return err
			}, 1},
			{"ok/a cancelled job revived", func() error {
				if _, err := db.CancelJob(ctx, j.ID, t0); err != nil {
					return err
				}
				_, err := db.RetryJobNow(ctx, j.ID, t0)
				return err
			}, 2},
		}
		for _, s := range steps {
			if err := s.do(); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			got, err := db.GetJob(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Revivals != s.want {
				t.Errorf("%s: %d revivals, want %d", s.name, got.Revivals, s.want)
			}
		}
	})
}
