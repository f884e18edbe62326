package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A job can be running under a runner's lease with no attempt of that
// runner working on it: the store committed a claim, or RunNow's leased
// insert, whose answer never reached the runner (the connection cut as
// the commit returned, PostgreSQL restarting). Nothing works on such a
// job, so it must not wait for a restart: once its lease lapses the
// runner itself takes it up again — another instance would, but a lone
// instance has no other — and while other jobs of its kind run here
// the renewal that finds it (and would keep its lease alive for as long
// as they run) hands it back. Each test stores such a job, leased to the
// running runner, straight through the store, as the lost answer left it.
func TestAJobLeasedToARunnerThatNeverGotItIsRunWhenItsKindIsIdle(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const lease = 30 * time.Second
		clk := clocktest.New(start)
		db := openDB(t, "")
		q := NewQueue(db, clk)
		ran := make(chan int, 1)
		h := newFuncHandler("k", func(_ context.Context, j *Job) Outcome { ran <- j.Attempts; return Done() })
		h.lease = lease
		r := startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: time.Second}, h)

		job, _, err := db.EnqueueJobLeased(ctx, store.NewJob{Kind: "k", MaxAttempts: 3}, r.Owner(), clk.Now().Add(lease), clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		for clk.Now().Before(start.Add(3 * lease)) {
			select {
			case attempts := <-ran:
				if now := clk.Now(); now.Before(start.Add(lease)) {
					t.Fatalf("the job ran at +%s, before its lease lapsed", now.Sub(start))
				}
				if attempts != 2 {
					t.Errorf("the job's run is attempt %d, want 2, its lost claim counted as an attempt cut short", attempts)
				}
				waitStatus(t, q, job.ID, store.JobDone)
				return
			default:
			}
			waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clk.Set(at)
		}
		got, _ := q.Get(ctx, job.ID)
		t.Fatalf("two leases after its lease lapsed the job is %s, leased to %q until +%s; want run by the runner",
			got.Status, got.LeaseOwner, got.LeaseUntil.Sub(start))
	})
}

func TestAJobLeasedToARunnerThatNeverGotItIsHandedBackWhileItsKindIsBusy(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const lease = 30 * time.Second
		clk := clocktest.New(start)
		db := openDB(t, "")
		q := NewQueue(db, clk)
		started, release := make(chan struct{}, 1), make(chan struct{})
		defer close(release)
		ran := make(chan int, 1)
		h := newFuncHandler("k", func(ctx context.Context, j *Job) Outcome {
			if j.Key == "busy" {
				started <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
				return Done()
			}
			ran <- j.Attempts
			return Done()
		})
		h.lease = lease
		r := startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: lease / 3}, h)
		if _, _, err := q.Enqueue(ctx, Spec{Kind: "k", Key: "busy"}); err != nil {
			t.Fatal(err)
		}
		<-started

		job, _, err := db.EnqueueJobLeased(ctx, store.NewJob{Kind: "k", MaxAttempts: 3}, r.Owner(), clk.Now().Add(lease), clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		for clk.Now().Before(start.Add(3 * lease)) {
			select {
			case <-ran:
				waitStatus(t, q, job.ID, store.JobDone)
				return
			default:
			}
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clk.Set(at)
		}
		got, _ := q.Get(ctx, job.ID)
		t.Fatalf("after three leases the job is %s, leased to %q until +%s; want handed back and run",
			got.Status, got.LeaseOwner, got.LeaseUntil.Sub(start))
	})
}
