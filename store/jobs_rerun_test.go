package store

import (
	"context"
	"testing"
	"time"
)

// An enqueue with Rerun that finds its kind and key's job running asks
// it to run once more, at the earliest time asked for: the attempt
// recorded done leaves it ready then, with a fresh attempt budget. Every
// other end of the attempt meets the request or drops it, and leaves
// none behind; an enqueue without Rerun asks nothing.
func TestAnEnqueueWithRerunOfARunningJobHasItRunAgainAfterItsAttempt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const owner = "runner"
		later, sooner := t0.Add(3*time.Second), t0.Add(2*time.Second)
		tests := []struct {
			name   string
			rerun  bool
			cancel bool // an operator cancels the job before its attempt ends
			// end ends the attempt, as the runner records it.
			end        func(db *DB, id int64) (JobStatus, error)
			wantStatus JobStatus
			wantRunAt  time.Time
			// wantNext is the attempt number of the next run (ready only).
			wantNext int
		}{
			{"ok/done: ready again at the earliest time asked for, a fresh budget", true, false, complete, JobReady, sooner, 1},
			{"ok/done without Rerun: done", false, false, complete, JobDone, time.Time{}, 0},
			{"ok/done after a cancel: done, not run again", true, true, complete, JobDone, time.Time{}, 0},
			{"ok/a retry: ready at its own time, the request met by it", true, false, func(db *DB, id int64) (JobStatus, error) {
				return db.RetryJob(context.Background(), id, owner, t0.Add(time.Hour), "boom", false, t0)
			}, JobReady, t0.Add(time.Hour), 2},
			{"ok/a release: ready now, the request met by it", true, false, func(db *DB, id int64) (JobStatus, error) {
				return JobReady, db.ReleaseJob(context.Background(), id, owner, t0)
			}, JobReady, t0, 1},
			{"ok/failed: retired, the request dropped", true, false, func(db *DB, id int64) (JobStatus, error) {
				return JobFailed, db.RetireJob(context.Background(), id, owner, JobFailed, "no", t0)
			}, JobFailed, time.Time{}, 0},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				nj := NewJob{Kind: "k", Key: "issuer-1", MaxAttempts: 3, RunAt: t0}
				j, _, err := db.EnqueueJob(ctx, nj, t0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.ClaimJobs(ctx, "k", owner, t0, t0.Add(time.Minute), 1); err != nil {
					t.Fatal(err)
				}
				for _, at := range []time.Time{later, sooner, later} {
					nj.RunAt, nj.Rerun = at, tc.rerun
					got, created, err := db.EnqueueJob(ctx, nj, t0)
					if err != nil || created || got.ID != j.ID || got.Status != JobRunning {
						t.Fatalf("enqueue while it runs: %+v created=%v err=%v; want job %d, running", got, created, err, j.ID)
					}
				}
				if tc.cancel {
					if _, err := db.CancelJob(ctx, j.ID, t0); err != nil {
						t.Fatal(err)
					}
				}
				st, err := tc.end(db, j.ID)
				if err != nil || st != tc.wantStatus {
					t.Fatalf("ending the attempt: %v %v; want %s", st, err, tc.wantStatus)
				}
				got, err := db.GetJob(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != tc.wantStatus || got.LeaseOwner != "" || (tc.wantStatus == JobReady && !got.RunAt.Equal(tc.wantRunAt)) {
					t.Fatalf("job %+v; want %s (at %s), unleased", got, tc.wantStatus, tc.wantRunAt)
				}
				if tc.wantStatus != JobReady {
					return
				}
				if !got.FinishedAt.IsZero() {
					t.Errorf("a job ready again has finished_at %s", got.FinishedAt)
				}
				// The next attempt is an ordinary one: recorded done, the
				// job is done, no request left behind.
				claimed, err := db.ClaimJobs(ctx, "k", owner, got.RunAt, got.RunAt.Add(time.Minute), 1)
				if err != nil || len(claimed) != 1 || claimed[0].ID != j.ID {
					t.Fatalf("claiming it again: %+v %v", claimed, err)
				}
				if claimed[0].Attempts != tc.wantNext {
					t.Errorf("the next run is attempt %d; want %d", claimed[0].Attempts, tc.wantNext)
				}
				if st, err := db.CompleteJob(ctx, j.ID, owner, got.RunAt); err != nil || st != JobDone {
					t.Fatalf("completing the next attempt: %v %v; want done", st, err)
				}
			})
		}
	})
}

func complete(db *DB, id int64) (JobStatus, error) {
	return db.CompleteJob(context.Background(), id, "runner", t0)
}

// A request to run again made before another runner took the job over
// (its lease lapsed) is met by that runner's attempt, which begins after
// it: recorded done, the job is done, not run once more for nothing.
func TestARerunRequestedBeforeALapsedJobIsTakenOverIsMetByTheTakeOver(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		nj := NewJob{Kind: "k", Key: "issuer-1", MaxAttempts: 3, RunAt: t0}
		j, _, err := db.EnqueueJob(ctx, nj, t0)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1); err != nil || len(c) != 1 {
			t.Fatalf("claim by a: %+v %v", c, err)
		}
		nj.Rerun = true
		if got, created, err := db.EnqueueJob(ctx, nj, t0.Add(time.Second)); err != nil || created || got.ID != j.ID {
			t.Fatalf("enqueue while a runs it: %+v created=%v err=%v; want job %d", got, created, err, j.ID)
		}
		takeover := t0.Add(2 * time.Minute)
		if c, err := db.ClaimJobs(ctx, "k", "b", takeover, takeover.Add(time.Minute), 1); err != nil || len(c) != 1 || c[0].ID != j.ID {
			t.Fatalf("claim by b after a's lease lapsed: %+v %v; want job %d", c, err, j.ID)
		}
		if st, err := db.CompleteJob(ctx, j.ID, "b", takeover); err != nil || st != JobDone {
			t.Fatalf("b records its attempt done: %v %v; want done", st, err)
		}
	})
}
