package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestEnqueueWithSameKindAndKeyReturnsTheLiveJob(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		nj := NewJob{Kind: "k", Key: "order-1", Payload: []byte(`{"a":1}`), MaxAttempts: 3}

		first, created, err := db.EnqueueJob(ctx, nj, t0)
		if err != nil || !created {
			t.Fatalf("first enqueue: created=%v err=%v", created, err)
		}
		second, created, err := db.EnqueueJob(ctx, nj, t0)
		if err != nil || created || second.ID != first.ID {
			t.Fatalf("second enqueue: id=%d created=%v err=%v; want id %d, not created", second.ID, created, err, first.ID)
		}
		// Running is live too.
		if _, err := db.ClaimJobs(ctx, "k", "me", t0, t0.Add(time.Minute), 1); err != nil {
			t.Fatal(err)
		}
		if again, created, _ := db.EnqueueJob(ctx, nj, t0); created || again.ID != first.ID {
			t.Fatalf("enqueue while running made a new row %d", again.ID)
		}
		if _, err := db.CompleteJob(ctx, first.ID, "me", t0); err != nil {
			t.Fatal(err)
		}
		third, created, err := db.EnqueueJob(ctx, nj, t0)
		if err != nil || !created || third.ID == first.ID {
			t.Fatalf("enqueue after settling: id=%d created=%v err=%v; want a new row", third.ID, created, err)
		}
		// A different key, and no key at all, never collide.
		for _, key := range []string{"order-2", "", ""} {
			if _, created, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: key, MaxAttempts: 1}, t0); err != nil || !created {
				t.Fatalf("enqueue key %q: created=%v err=%v", key, created, err)
			}
		}
	})
}

func TestSettlingWritesAreGuardedOnTheLeaseOwner(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3}, t0)
		if _, err := db.ClaimJobs(ctx, "k", "owner-a", t0, t0.Add(time.Minute), 1); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			do   func() error
		}{
			{"complete", func() error { _, err := db.CompleteJob(ctx, j.ID, "owner-b", t0); return err }},
			{"retry", func() error { _, err := db.RetryJob(ctx, j.ID, "owner-b", t0, "x", false, t0); return err }},
			{"reschedule", func() error { _, err := db.RescheduleJob(ctx, j.ID, "owner-b", t0.Add(time.Hour), t0); return err }},
			{"retire", func() error { return db.RetireJob(ctx, j.ID, "owner-b", JobFailed, "x", t0) }},
			{"release", func() error { return db.ReleaseJob(ctx, j.ID, "owner-b", t0) }},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.do(); !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("got %v, want ErrLeaseLost", err)
				}
			})
		}
		got, _ := db.GetJob(ctx, j.ID)
		if got.Status != JobRunning || got.LeaseOwner != "owner-a" {
			t.Fatalf("job changed by a non-owner: %+v", got)
		}
	})
}

func TestClaimTakesOnlyDueJobsAndExpiredLeases(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		due, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3}, t0)
		db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3, RunAt: t0.Add(time.Hour)}, t0)
		db.EnqueueJob(ctx, NewJob{Kind: "other", MaxAttempts: 3}, t0)

		got, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10)
		if err != nil || len(got) != 1 || got[0].ID != due.ID || got[0].Attempts != 1 {
			t.Fatalf("claim: %+v, %v; want only job %d at attempt 1", got, err, due.ID)
		}
		if got, _ := db.ClaimJobs(ctx, "k", "b", t0.Add(59*time.Second), t0.Add(2*time.Minute), 10); len(got) != 0 {
			t.Fatalf("claimed a job whose lease has not expired: %+v", got)
		}
		got, _ = db.ClaimJobs(ctx, "k", "b", t0.Add(time.Minute), t0.Add(2*time.Minute), 10)
		if len(got) != 1 || got[0].ID != due.ID || got[0].LeaseOwner != "b" || got[0].Attempts != 2 {
			t.Fatalf("reclaim after lease: %+v", got)
		}
		// The renewals say whose the job is now: the runner that lost it
		// renews nothing, its new holder renews it.
		for _, tc := range []struct {
			owner string
			want  []int64
		}{{"a", nil}, {"b", []int64{due.ID}}} {
			ids, err := db.ExtendJobLeases(ctx, "k", tc.owner, t0.Add(3*time.Minute), t0.Add(time.Minute))
			if err != nil || len(ids) != len(tc.want) || len(ids) == 1 && ids[0] != tc.want[0] {
				t.Errorf("renewal by %s extended %v (%v), want %v", tc.owner, ids, err, tc.want)
			}
		}
	})
}

// A claimer never takes back its own lapsed lease (an attempt of its may
// still run, its renewals having failed) unless it says it has nothing
// of the kind in flight (ClaimJobsIdle): then the job is one whose claim
// it never heard back from, and only that claimer may be left to run it.
func TestOnlyAnIdleClaimTakesTheClaimersOwnLapsedLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3}, t0)
		if got, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10); err != nil || len(got) != 1 {
			t.Fatalf("claim: %+v, %v", got, err)
		}
		later := t0.Add(2 * time.Minute)
		if due, err := db.AnyJobDue(ctx, "k", nil, "a", later); err != nil || due {
			t.Errorf("AnyJobDue for its holder = %v, %v; want its own lapsed lease not due", due, err)
		}
		if got, err := db.ClaimJobs(ctx, "k", "a", later, later.Add(time.Minute), 10); err != nil || len(got) != 0 {
			t.Fatalf("a busy claimer took back its own lapsed lease: %+v, %v", got, err)
		}
		if due, err := db.AnyJobDue(ctx, "k", nil, "", later); err != nil || !due {
			t.Errorf("AnyJobDue skipping no owner = %v, %v; want the lapsed lease due", due, err)
		}
		got, err := db.ClaimJobsIdle(ctx, "k", nil, "a", later, later.Add(time.Minute), 10)
		if err != nil || len(got) != 1 || got[0].ID != j.ID || got[0].LeaseOwner != "a" || got[0].Attempts != 2 {
			t.Fatalf("idle claim: %+v, %v; want job %d leased to a again at attempt 2", got, err, j.ID)
		}
		if got, err := db.ClaimJobsIdle(ctx, "k", nil, "a", later, later.Add(time.Minute), 10); err != nil || len(got) != 0 {
			t.Fatalf("an idle claim took a lease not lapsed: %+v, %v", got, err)
		}
	})
}

func TestCancelAndRetryNowFollowTheJobsState(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "x", MaxAttempts: 3, RunAt: t0.Add(time.Hour)}, t0)

		c, err := db.CancelJob(ctx, j.ID, t0)
		if err != nil || c.Status != JobCancelled {
			t.Fatalf("cancel ready: %+v %v", c, err)
		}
		if _, err := db.CancelJob(ctx, j.ID, t0); !errors.Is(err, ErrWrongState) {
			t.Fatalf("cancel twice: %v, want ErrWrongState", err)
		}
		if _, err := db.CancelJob(ctx, 9999, t0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cancel unknown: %v, want ErrNotFound", err)
		}
		// A new live job with the same identity blocks reviving the old one.
		live, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "x", MaxAttempts: 3}, t0)
		if _, err := db.RetryJobNow(ctx, j.ID, t0); !errors.Is(err, ErrConflict) {
			t.Fatalf("retry with a live twin: %v, want ErrConflict", err)
		}
		db.CancelJob(ctx, live.ID, t0)
		r, err := db.RetryJobNow(ctx, j.ID, t0.Add(time.Second))
		if err != nil || r.Status != JobReady || r.Attempts != 0 || !r.RunAt.Equal(t0.Add(time.Second)) || r.CancelRequested {
			t.Fatalf("retry now: %+v %v", r, err)
		}
		// Cancelling a running job marks it (see
		// TestARetryOfACancelledRunningJobLeavesItForTheRunnerToRetire).
		// (The claim takes the cancelled twin's owed Abandon too.)
		db.ClaimJobs(ctx, "k", "a", t0.Add(time.Second), t0.Add(time.Minute), 10)
		c, err = db.CancelJob(ctx, j.ID, t0)
		if err != nil || c.Status != JobRunning || !c.CancelRequested {
			t.Fatalf("cancel running: %+v %v", c, err)
		}
		if _, err := db.RetryJobNow(ctx, 12345, t0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("retry unknown: %v", err)
		}
	})
}

// A retry or a reschedule of a job an operator cancelled while it ran
// leaves it running under its lease and says so (JobRunning): the runner
// retires it as cancelled once its handler's Abandon has succeeded. A
// write that retired it at once would leave a runner stopping before that
// Abandon nothing to reclaim. A non-owner's write is still ErrLeaseLost.
func TestARetryOfACancelledRunningJobLeavesItForTheRunnerToRetire(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name  string
			owner string
			write func(db *DB, id int64, owner string) (JobStatus, error)
		}{
			{"retry", "a", func(db *DB, id int64, owner string) (JobStatus, error) {
				return db.RetryJob(context.Background(), id, owner, t0.Add(time.Hour), "boom", false, t0)
			}},
			{"reschedule", "a", func(db *DB, id int64, owner string) (JobStatus, error) {
				return db.RescheduleJob(context.Background(), id, owner, t0.Add(time.Hour), t0)
			}},
			{"retry by a non-owner", "b", func(db *DB, id int64, owner string) (JobStatus, error) {
				return db.RetryJob(context.Background(), id, owner, t0.Add(time.Hour), "boom", false, t0)
			}},
			{"reschedule by a non-owner", "b", func(db *DB, id int64, owner string) (JobStatus, error) {
				return db.RescheduleJob(context.Background(), id, owner, t0.Add(time.Hour), t0)
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				j, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3}, t0)
				if _, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1); err != nil {
					t.Fatal(err)
				}
				if _, err := db.CancelJob(ctx, j.ID, t0); err != nil {
					t.Fatal(err)
				}
				st, err := tc.write(db, j.ID, tc.owner)
				if tc.owner != "a" {
					if !errors.Is(err, ErrLeaseLost) {
						t.Fatalf("got %v %v, want ErrLeaseLost", st, err)
					}
				} else if err != nil || st != JobRunning {
					t.Fatalf("got %v %v, want running", st, err)
				}
				got, err := db.GetJob(ctx, j.ID)
				if err != nil || got.Status != JobRunning || got.LeaseOwner != "a" || !got.CancelRequested || got.Attempts != 1 {
					t.Fatalf("after the write the job is %+v (%v), want running under a's lease, unchanged", got, err)
				}
				if err := db.RetireJob(ctx, j.ID, "a", JobCancelled, "cancelled", t0); err != nil {
					t.Fatalf("retiring it then: %v", err)
				}
			})
		}
	})
}

func TestPruneDeletesOnlyOldSettledJobs(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		old, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1}, t0)
		db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1)
		db.CompleteJob(ctx, old.ID, "a", t0)
		recent, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1}, t0)
		db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1)
		db.CompleteJob(ctx, recent.ID, "a", t0.Add(48*time.Hour))
		waiting, _, _ := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1, RunAt: t0.Add(1000 * time.Hour)}, t0)

		n, err := db.PruneJobs(ctx, t0.Add(24*time.Hour))
		if err != nil || n != 1 {
			t.Fatalf("pruned %d, %v; want 1", n, err)
		}
		if _, err := db.GetJob(ctx, old.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("old job still there: %v", err)
		}
		for _, id := range []int64{recent.ID, waiting.ID} {
			if _, err := db.GetJob(ctx, id); err != nil {
				t.Fatalf("job %d pruned: %v", id, err)
			}
		}
	})
}

// cancelWaiting stores a job waiting for a later attempt and cancels it at
// t0, for the tests of the Abandon it then owes.
func cancelWaiting(t *testing.T, db *DB) Job {
	t.Helper()
	ctx := context.Background()
	j, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 3, RunAt: t0.Add(time.Hour)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.CancelJob(ctx, j.ID, t0)
	if err != nil || c.Status != JobCancelled || !c.AbandonOwed || !c.FinishedAt.Equal(t0) {
		t.Fatalf("cancel of a waiting job: %+v %v; want cancelled, finished, its abandon owed", c, err)
	}
	return c
}

// A waiting job an operator cancelled is cancelled at once and owes its
// Abandon, which one runner claims: the job stays cancelled, with no
// attempt counted, and no other runner claims it while the lease lives;
// once the Abandon is recorded, nothing claims it again.
func TestACancelledWaitingJobsAbandonIsClaimedByOneRunnerAndTheJobStaysCancelled(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j := cancelWaiting(t, db)
		if due, err := db.AnyJobDue(ctx, "k", nil, "a", t0); err != nil || !due {
			t.Fatalf("AnyJobDue = %v, %v; the abandon is due", due, err)
		}
		if next, ok, err := db.NextJobDue(ctx, []string{"k"}, nil); err != nil || !ok || next.After(t0) {
			t.Fatalf("NextJobDue = %v %v %v; the abandon is due now", next, ok, err)
		}
		got, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10)
		if err != nil || len(got) != 1 || got[0].ID != j.ID || got[0].Status != JobCancelled || got[0].Attempts != 0 ||
			!got[0].AbandonOwed || got[0].LeaseOwner != "a" {
			t.Fatalf("claim: %+v %v; want the job, cancelled, unattempted, leased to a", got, err)
		}
		if got, err := db.ClaimJobs(ctx, "k", "b", t0, t0.Add(time.Minute), 10); err != nil || len(got) != 0 {
			t.Fatalf("a second claimer took %+v (%v) while a's lease lives", got, err)
		}
		if due, err := db.AnyJobDue(ctx, "k", nil, "b", t0); err != nil || due {
			t.Fatalf("AnyJobDue for b = %v, %v; the abandon is a's", due, err)
		}
		if ids, err := db.ExtendJobLeases(ctx, "k", "a", t0.Add(2*time.Minute), t0); err != nil || len(ids) != 1 || ids[0] != j.ID {
			t.Fatalf("extending a's leases: %v %v; want the abandon's", ids, err)
		}
		if err := db.SettleJobAbandon(ctx, j.ID, "a", t0); err != nil {
			t.Fatal(err)
		}
		after, err := db.GetJob(ctx, j.ID)
		if err != nil || after.Status != JobCancelled || after.AbandonOwed || after.LeaseOwner != "" || !after.FinishedAt.Equal(t0) {
			t.Fatalf("after its abandon the job is %+v (%v); want cancelled, owing nothing, unleased", after, err)
		}
		if got, err := db.ClaimJobs(ctx, "k", "b", t0.Add(time.Hour), t0.Add(2*time.Hour), 10); err != nil || len(got) != 0 {
			t.Fatalf("claimed again once abandoned: %+v %v", got, err)
		}
	})
}

// An owed Abandon whose claimer stopped renewing its lease (a crash) is
// claimed by another runner once the lease lapsed, and the first
// claimer's late record of it is refused.
func TestAnOwedAbandonWhoseLeaseLapsedIsTakenOverByAnotherRunner(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j := cancelWaiting(t, db)
		if got, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10); err != nil || len(got) != 1 {
			t.Fatalf("claim: %+v %v", got, err)
		}
		later := t0.Add(2 * time.Minute)
		if got, err := db.ClaimJobs(ctx, "k", "b", later, later.Add(time.Minute), 10); err != nil || len(got) != 1 || got[0].ID != j.ID {
			t.Fatalf("takeover: %+v %v; want the job", got, err)
		}
		if err := db.SettleJobAbandon(ctx, j.ID, "a", later); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("a's record after the takeover: %v, want ErrLeaseLost", err)
		}
		if err := db.SettleJobAbandon(ctx, j.ID, "b", later); err != nil {
			t.Fatal(err)
		}
	})
}

// A claimed Abandon handed back (the runner had no slot for it) stays
// cancelled and owed, for the next claim.
func TestAReleasedAbandonStaysCancelledAndOwed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j := cancelWaiting(t, db)
		if _, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10); err != nil {
			t.Fatal(err)
		}
		if err := db.ReleaseJob(ctx, j.ID, "a", t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetJob(ctx, j.ID)
		if err != nil || got.Status != JobCancelled || !got.AbandonOwed || got.LeaseOwner != "" || got.Attempts != 0 {
			t.Fatalf("released: %+v %v; want cancelled, owed, unleased", got, err)
		}
		if got, err := db.ClaimJobs(ctx, "k", "b", t0, t0.Add(time.Minute), 10); err != nil || len(got) != 1 {
			t.Fatalf("claim after the release: %+v %v; want the job", got, err)
		}
	})
}

// An operator's retry of a cancelled job whose Abandon has not run yet
// revives it and drops the Abandon: the work is to happen after all.
func TestARevivedCancelledJobNoLongerOwesItsAbandon(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j := cancelWaiting(t, db)
		r, err := db.RetryJobNow(ctx, j.ID, t0)
		if err != nil || r.Status != JobReady || r.AbandonOwed || r.Revivals != 1 {
			t.Fatalf("revived: %+v %v; want ready, owing nothing", r, err)
		}
		got, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10)
		if err != nil || len(got) != 1 || got[0].Status != JobRunning || got[0].Attempts != 1 {
			t.Fatalf("claim of the revived job: %+v %v; want an attempt", got, err)
		}
	})
}

// An operator's retry of a cancelled job while a runner runs its owed
// Abandon is refused, saying so: reviving it then would have the job run
// while its giving up lands. Once that runner's lease has lapsed (it
// died), the retry revives it.
func TestARetryOfACancelledJobWhoseAbandonARunnerIsRunningIsRefused(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j := cancelWaiting(t, db)
		if _, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RetryJobNow(ctx, j.ID, t0); !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "giving it up") {
			t.Fatalf("retry while its abandon runs: %v; want ErrWrongState saying so", err)
		}
		r, err := db.RetryJobNow(ctx, j.ID, t0.Add(2*time.Minute))
		if err != nil || r.Status != JobReady || r.AbandonOwed || r.LeaseOwner != "" {
			t.Fatalf("retry once the lease lapsed: %+v %v; want ready, owing nothing, unleased", r, err)
		}
	})
}

// The prune of settled jobs keeps a cancelled job whose Abandon is still
// owed, however old: deleting it would drop the Abandon.
func TestPruneKeepsACancelledJobWhoseAbandonIsOwed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		j := cancelWaiting(t, db)
		if n, err := db.PruneJobs(ctx, t0.Add(24*time.Hour)); err != nil || n != 0 {
			t.Fatalf("pruned %d, %v; want the owing job kept", n, err)
		}
		if _, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 10); err != nil {
			t.Fatal(err)
		}
		if err := db.SettleJobAbandon(ctx, j.ID, "a", t0); err != nil {
			t.Fatal(err)
		}
		if n, err := db.PruneJobs(ctx, t0.Add(24*time.Hour)); err != nil || n != 1 {
			t.Fatalf("pruned %d, %v; want the job, abandoned", n, err)
		}
	})
}

// The operator's count of owed abandons names, by kind, the cancelled
// jobs still owing theirs: not a waiting job, not a cancelled one whose
// Abandon a runner has recorded.
func TestOwedAbandonsAreCountedByKindUntilARunnerRecordsThem(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		for _, kind := range []string{"k", "k", "other", "given_up"} {
			j, _, err := db.EnqueueJob(ctx, NewJob{Kind: kind, MaxAttempts: 3, RunAt: t0.Add(time.Hour)}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.CancelJob(ctx, j.ID, t0); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "waiting", MaxAttempts: 3, RunAt: t0}, t0); err != nil {
			t.Fatal(err)
		}
		given, err := db.ClaimJobs(ctx, "given_up", "a", t0, t0.Add(time.Minute), 10)
		if err != nil || len(given) != 1 {
			t.Fatalf("claiming the abandon: %+v %v", given, err)
		}
		if err := db.SettleJobAbandon(ctx, given[0].ID, "a", t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.CountOwedAbandons(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []JobCount{{Kind: "k", Status: JobCancelled, N: 2}, {Kind: "other", Status: JobCancelled, N: 1}}
		if !slices.Equal(got, want) {
			t.Errorf("owed abandons %+v; want %+v", got, want)
		}
	})
}

// The jobs list filtered to owed abandons lists the cancelled jobs still
// owing theirs, and neither a waiting job nor a cancelled one given up.
func TestTheJobsListFilteredToOwedAbandonsListsOnlyTheJobsStillOwingOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		owed := cancelWaiting(t, db)
		given, _, err := db.EnqueueJob(ctx, NewJob{Kind: "given_up", MaxAttempts: 3, RunAt: t0.Add(time.Hour)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.CancelJob(ctx, given.ID, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ClaimJobs(ctx, "given_up", "a", t0, t0.Add(time.Minute), 10); err != nil {
			t.Fatal(err)
		}
		if err := db.SettleJobAbandon(ctx, given.ID, "a", t0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: "waiting", MaxAttempts: 3, RunAt: t0}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.ListJobs(ctx, JobFilter{AbandonOwed: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != owed.ID {
			t.Errorf("listed %+v; want only job %d", got, owed.ID)
		}
	})
}
