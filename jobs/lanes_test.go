package jobs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// ranBy records which runner ran which job.
type ranBy struct {
	mu  sync.Mutex
	ran map[int64]string
}

func (r *ranBy) handler(kind, who string) *funcHandler {
	return newFuncHandler(kind, func(_ context.Context, j *Job) Outcome {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ran[j.ID] = who
		return Done()
	})
}

func (r *ranBy) who(id int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ran[id]
}

func TestARunnerNeverClaimsAJobOfALaneItDoesNotServe(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		rec := &ranBy{ran: map[int64]string{}}
		// The front end: two processes' worth of store, queue and runner.
		front := NewQueue(openDB(t, place), nil)
		startRunner(t, front, RunnerOptions{PollInterval: 20 * time.Millisecond}, rec.handler("k", "front"))
		laned, _, err := front.Enqueue(ctx, Spec{Kind: "k", Key: "sign", Lane: "signer:p"})
		if err != nil {
			t.Fatal(err)
		}
		open, _, err := front.Enqueue(ctx, Spec{Kind: "k", Key: "open"})
		if err != nil {
			t.Fatal(err)
		}
		// The front end claimed and ran the open job: the claim that took
		// it would have taken the laned job too, had it been allowed.
		waitStatus(t, front, open.ID, store.JobDone)
		got, err := front.Get(ctx, laned.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != store.JobReady || got.Attempts != 0 || got.LeaseOwner != "" {
			t.Fatalf("the laned job after the front end's claims: %s, attempts %d, lease %q; want ready, untouched",
				got.Status, got.Attempts, got.LeaseOwner)
		}
		// The worker serves the lane and takes it.
		worker := NewQueue(openDB(t, place), nil)
		startRunner(t, worker, RunnerOptions{PollInterval: 20 * time.Millisecond, Lanes: []string{"signer:p"}}, rec.handler("k", "worker"))
		done := waitStatus(t, worker, laned.ID, store.JobDone)
		if who := rec.who(laned.ID); who != "worker" || done.Attempts != 1 {
			t.Fatalf("the laned job ran on %q in %d attempts, want the worker in 1", who, done.Attempts)
		}
		if who := rec.who(open.ID); who != "front" {
			t.Fatalf("the open job ran on %q", who)
		}
	})
}

func TestRunNowQueuesAJobOfALaneTheLocalRunnerDoesNotServe(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
		job, done, err := q.RunNow(context.Background(), Spec{Kind: "k", Key: "x", Lane: "signer:p"}, time.Second)
		if err != nil || done || job.Status != store.JobReady || job.LeaseOwner != "" {
			t.Fatalf("RunNow: %s, lease %q, done=%v err=%v; want a ready job left for the lane", job.Status, job.LeaseOwner, done, err)
		}
	})
}

func TestAPeriodicJobIsMovedToTheLaneItsHandlerNames(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		q := NewQueue(openDB(t, ""), nil)
		// Stored by an older binary, in the default lane.
		old, _, err := q.Enqueue(ctx, Spec{Kind: "refresh", Key: "refresh"})
		if err != nil {
			t.Fatal(err)
		}
		p := &Periodic{Name: "refresh", Every: time.Hour, Lane: "signer", Do: func(context.Context) error { return nil }}
		if err := p.Recover(ctx, q); err != nil {
			t.Fatal(err)
		}
		got, err := q.Get(ctx, old.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Lane != "signer" || got.Status != store.JobReady {
			t.Fatalf("after Recover the periodic row is in lane %q (%s), want %q", got.Lane, got.Status, "signer")
		}
	})
}
