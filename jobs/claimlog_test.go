package jobs

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// While the database is away every poll's claim fails; the runner says so
// once a minute (with how many failed), not once a poll per kind.
func TestFailedClaimsAreLoggedOnceAnIntervalNotOnceAPoll(t *testing.T) {
	db := openDB(t, "")
	core, logs := observer.New(zap.ErrorLevel)
	idle := func(context.Context, *Job) Outcome { return Done() }
	startRunner(t, NewQueue(db, nil), RunnerOptions{Logger: zap.New(core), PollInterval: 5 * time.Millisecond},
		newFuncHandler("one", idle), newFuncHandler("two", idle))
	db.Close() // every claim fails from now on
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterField(zap.String("event", "jobs_claim_failed")).Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no failed claim was logged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // some forty polls more, of two kinds
	if n := logs.FilterField(zap.String("event", "jobs_claim_failed")).Len(); n != 1 {
		t.Errorf("%d lines of failed claims within a quarter second; want 1", n)
	}
}
