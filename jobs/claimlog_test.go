package jobs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/store"
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

// unwritableDB opens a store that reads but cannot take writes: a SQLite
// file at its size bound after filler jobs took its last pages (a full
// disk), a PostgreSQL session that is read-only. Before it does, it
// enqueues a due job of kind, so that the runner's claim of it is a write
// that fails — on SQLite, a claim by an owner whose name (the lease's
// mark on the row) cannot fit in the pages the row has.
func unwritableDB(t *testing.T, kind string) *store.DB {
	t.Helper()
	ctx := context.Background()
	place := newPlace(t)
	setup := openDB(t, place)
	if _, _, err := NewQueue(setup, nil).Enqueue(ctx, Spec{Kind: kind, Key: "due"}); err != nil {
		t.Fatal(err)
	}
	if testDialects[testDialect(t)].name == "postgres" {
		db, err := store.OpenPostgres(ctx, place+" default_transaction_read_only=on", store.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	setup.Close()
	fi, err := os.Stat(place)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.OpenSQLite(ctx, place, store.SQLiteOptions{MaxPages: int(fi.Size()/4096) + 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	filler := strings.Repeat("x", 400)
	for i := 0; ; i++ {
		if _, _, err := NewQueue(db, nil).Enqueue(ctx, Spec{Kind: "filler", Key: fmt.Sprint(i), Payload: filler}); err != nil {
			break
		}
		if i == 10000 {
			t.Fatal("the database never filled up")
		}
	}
	return db
}

// A database that reads but cannot take writes (a full disk, a read-only
// database): the claim of a due job fails at every poll while the polls
// of idle kinds, reads that find nothing due, succeed. Those claim
// nothing, so they say nothing about whether claims work again: the
// runner logs the failures once an interval, and no recovery between.
func TestFailedClaimsOfADatabaseThatReadsButCannotWriteAreLoggedOnceAnInterval(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := unwritableDB(t, "due")
		core, logs := observer.New(zap.InfoLevel)
		idle := func(context.Context, *Job) Outcome { return Done() }
		startRunner(t, NewQueue(db, nil), RunnerOptions{Logger: zap.New(core), PollInterval: 5 * time.Millisecond, Owner: strings.Repeat("o", 3500)},
			newFuncHandler("due", idle), newFuncHandler("idle", idle))
		deadline := time.Now().Add(10 * time.Second)
		for logs.FilterField(zap.String("event", "jobs_claim_failed")).Len() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no failed claim was logged")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(250 * time.Millisecond) // some fifty polls more, of both kinds
		failed := logs.FilterField(zap.String("event", "jobs_claim_failed")).Len()
		recovered := logs.FilterField(zap.String("event", "jobs_claim_recovered")).Len()
		if failed != 1 || recovered != 0 {
			t.Errorf("within a quarter second: %d lines of failed claims and %d of claims working again; want 1 and 0", failed, recovered)
		}
	})
}
