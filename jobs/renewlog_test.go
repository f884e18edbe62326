package jobs

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// While the database is away a runner with an attempt in flight cannot
// renew its lease; it says so once an interval (with how many failed),
// not at every turn of its loop, which then spins at a tenth of the poll
// interval because the renewal is overdue.
func TestFailedLeaseRenewalsAreLoggedOnceAnIntervalNotOnceATurn(t *testing.T) {
	db := openDB(t, "")
	core, logs := observer.New(zap.ErrorLevel)
	q := NewQueue(db, nil)
	started, finish := make(chan struct{}, 1), make(chan struct{})
	h := newFuncHandler("k", func(context.Context, *Job) Outcome {
		started <- struct{}{}
		<-finish
		return Done()
	})
	h.lease = 30 * time.Millisecond // renewed every 10ms
	startRunner(t, q, RunnerOptions{Logger: zap.New(core), PollInterval: 50 * time.Millisecond, StopTimeout: 100 * time.Millisecond}, h)
	defer close(finish)
	if _, _, err := q.Enqueue(context.Background(), Spec{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never started")
	}
	db.Close() // every renewal fails from now on
	waitFor(t, "a failed renewal logged", func() bool {
		return logs.FilterField(zap.String("event", "jobs_renew_failed")).Len() > 0
	})
	time.Sleep(300 * time.Millisecond) // some sixty turns of the loop more
	if n := logs.FilterField(zap.String("event", "jobs_renew_failed")).Len(); n != 1 {
		t.Errorf("%d lines of failed renewals within 300ms; want 1", n)
	}
}
