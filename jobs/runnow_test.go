package jobs

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestRunNowRunsTheJobInPlaceAndReportsItSettled(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		ran := make(chan int, 1)
		h := newFuncHandler("k", func(_ context.Context, j *Job) Outcome { ran <- j.Attempts; return Done() })
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
		job, done, err := q.RunNow(context.Background(), Spec{Kind: "k", Key: "x"}, 5*time.Second)
		if err != nil || !done {
			t.Fatalf("RunNow: done=%v err=%v", done, err)
		}
		if a := <-ran; a != 1 {
			t.Errorf("ran as attempt %d, want 1", a)
		}
		if got, _ := q.Get(context.Background(), job.ID); got.Status != store.JobDone {
			t.Errorf("job is %s, want done", got.Status)
		}
	})
}

func TestRunNowWithoutALocalRunnerQueuesTheJob(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		job, done, err := q.RunNow(context.Background(), Spec{Kind: "k"}, time.Second)
		if err != nil || done || job.Status != store.JobReady {
			t.Fatalf("RunNow: %+v done=%v err=%v; want a ready job", job, done, err)
		}
	})
}

func TestRunNowDoesNotWaitBeyondItsBoundButTheJobFinishes(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		release := make(chan struct{})
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { <-release; return Done() })
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
		job, done, err := q.RunNow(context.Background(), Spec{Kind: "k"}, 20*time.Millisecond)
		if err != nil || done {
			t.Fatalf("RunNow: done=%v err=%v; want not done yet", done, err)
		}
		close(release)
		waitStatus(t, q, job.ID, store.JobDone)
	})
}

func TestRunNowGivesALiveJobWithTheSameKeyBackUnrun(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
		first, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k", Key: "same", Delay: time.Hour})
		got, done, err := q.RunNow(context.Background(), Spec{Kind: "k", Key: "same"}, time.Second)
		if err != nil || done || got.ID != first.ID {
			t.Fatalf("RunNow: id %d done=%v err=%v; want the live job %d, not run", got.ID, done, err, first.ID)
		}
	})
}

// RunNow stores its job with a lazy write (no fsync of its own). A job
// whose attempt does not complete in time must still outlive a power
// loss, so RunNow then makes a durable write (store.Flush) before it
// returns; a job completed in time is as durable as its handler's writes
// and costs no extra fsync.
func TestRunNowMakesTheJobDurableUnlessItCompletedInTime(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name      string
			outcome   func(release <-chan struct{}) Outcome
			wait      time.Duration
			wantDone  bool
			wantFlush bool
		}{
			{"completed in time", func(<-chan struct{}) Outcome { return Done() }, 5 * time.Second, true, false},
			{"still running when the wait ends", func(r <-chan struct{}) Outcome { <-r; return Done() }, 20 * time.Millisecond, false, true},
			{"to be retried", func(<-chan struct{}) Outcome { return Retry("upstream busy") }, 5 * time.Second, true, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := newPlace(t)
				q := NewQueue(openDB(t, path), nil)
				release := make(chan struct{})
				defer close(release)
				h := newFuncHandler("k", func(context.Context, *Job) Outcome { return tc.outcome(release) })
				startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
				before := flushes(t, path)
				_, done, err := q.RunNow(context.Background(), Spec{Kind: "k"}, tc.wait)
				if err != nil || done != tc.wantDone {
					t.Fatalf("RunNow: done=%v err=%v; want done=%v", done, err, tc.wantDone)
				}
				if flushed := flushes(t, path) > before; flushed != tc.wantFlush {
					t.Errorf("flushed=%v, want %v", flushed, tc.wantFlush)
				}
			})
		}
	})
}

// flushes reads how many times the store at path (a place, see
// newPlace) was flushed, through a connection of its own.
func flushes(t *testing.T, path string) int64 {
	t.Helper()
	db, err := sql.Open(testDialects[testDialect(t)].raw(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(`SELECT COALESCE(MAX(n), 0) FROM flushes`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
