package jobs

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

var errDatabaseAway = errors.New("the database is away")

// An Abandon that could not write its side effects (the database away)
// says so, and is tried again until it succeeds; only then is the job
// retired. A runner that retired it after one try lost what Abandon was
// to write — the audit row of a revocation that failed, say — while the
// retirement itself waited out the outage.
func TestAnAbandonThatFailsIsTriedAgainAndTheJobRetiredOnlyOnceItSucceeds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const failures = 3
		ctx := context.Background()
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		var calls atomic.Int32
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Failed("the CA said no") })
		h.abandonErr = func(job *Job) error {
			n := calls.Add(1)
			if n <= failures {
				// The job is not retired while its Abandon fails.
				if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobRunning {
					t.Errorf("during abandon %d the job is %s (%v), want still running", n, got.Status, err)
				}
				return errDatabaseAway
			}
			return nil
		}
		startRunner(t, q, RunnerOptions{Clock: clk}, h)
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		got := waitStatus(t, q, job.ID, store.JobFailed)
		if n := len(h.abandons(job.ID)); n != failures+1 {
			t.Errorf("abandon called %d times, want %d (until it succeeded)", n, failures+1)
		}
		if got.LastError != "the CA said no" {
			t.Errorf("retired with %q, want the handler's reason", got.LastError)
		}
	})
}

// An Abandon that never succeeds is given up after AbandonRetry: the job
// is retired all the same, so that it does not hold a slot of its kind
// for ever, and the operator's log says so.
func TestAnAbandonThatKeepsFailingIsGivenUpAfterAbandonRetry(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		core, logs := observer.New(zap.WarnLevel)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Failed("the CA said no") })
		h.abandonErr = func(*Job) error { return errDatabaseAway }
		startRunner(t, q, RunnerOptions{Clock: clk, Logger: zap.New(core), AbandonRetry: time.Hour}, h)
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a second abandon", func() bool { return len(h.abandons(job.ID)) >= 2 })
		if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobRunning {
			t.Fatalf("before AbandonRetry passed the job is %s (%v), want still running", got.Status, err)
		}
		clk.Advance(time.Hour)
		waitStatus(t, q, job.ID, store.JobFailed)
		if n := logs.FilterField(zap.String("event", "jobs_abandon_failed")).Len(); n != 1 {
			t.Errorf("%d jobs_abandon_failed log lines, want 1", n)
		}
	})
}

// A runner that stops while a job's Abandon fails leaves the job
// unretired, as a crash would: another runner reclaims it when its lease
// lapses and abandons it again, and the job is retired once that Abandon
// succeeds.
func TestAJobWhoseAbandonFailedUntilTheRunnerStoppedIsAbandonedByTheNextRunner(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		const lease = 30 * time.Second
		place := newPlace(t)
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, place), clk)
		first := newFuncHandler("k", func(context.Context, *Job) Outcome { return Retry("still down") })
		first.abandonErr = func(*Job) error { return errDatabaseAway }
		first.lease = lease
		r, err := NewRunner(q, []Handler{first}, RunnerOptions{Clock: clk, StopTimeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a failed abandon", func() bool { return len(first.abandons(job.ID)) >= 1 })
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		if got, err := q.Get(ctx, job.ID); err != nil || got.Status != store.JobRunning {
			t.Fatalf("after the stop the job is %s (%v), want still running, unretired", got.Status, err)
		}

		clk.Advance(lease + time.Second)
		next := newFuncHandler("k", func(context.Context, *Job) Outcome {
			t.Error("the job was run again; its attempts were spent")
			return Done()
		})
		startRunner(t, NewQueue(openDB(t, place), clk), RunnerOptions{Clock: clk}, next)
		got := waitStatus(t, q, job.ID, store.JobFailed)
		if a := next.abandons(job.ID); len(a) != 1 {
			t.Errorf("the next runner abandoned the job %d times, want once", len(a))
		}
		if got.LastError == "" {
			t.Error("retired without a reason")
		}
	})
}
