package jobs

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// lockJobs makes the writes of the jobs table at place wait, as a backup
// holding SQLite's write lock or a long PostgreSQL migration does, until
// the returned function is called. Reads go on.
func lockJobs(t *testing.T, place string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	driver, dsn, lock := "sqlite", "file:"+place+"?_pragma=busy_timeout(10000)", "BEGIN IMMEDIATE"
	if testDialects[testDialect(t)].name == "postgres" {
		driver, dsn, lock = "pgx", place, "BEGIN; LOCK TABLE jobs IN EXCLUSIVE MODE"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, lock); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	unlock = func() {
		if done.Swap(true) {
			return
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
		db.Close()
	}
	t.Cleanup(unlock)
	return unlock
}

// databaseOutage is how long the database refuses the outcome's write:
// longer than a PostgreSQL restart or failover may take, and than the 30
// seconds after which a runner once gave up recording an outcome.
const databaseOutage = 35 * time.Second

// An attempt that ends while the database cannot take its outcome keeps
// trying to record it for as long as the outage lasts. A runner that gave
// up left the job running under its own lease, which no claim of its own
// takes back (and which its renewals kept alive while other jobs of the
// kind ran): the job, and the order waiting on it, stuck until the next
// restart.
func TestAnOutcomeThatCouldNotBeRecordedDuringAnOutageIsRecordedWhenItEnds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		t.Parallel() // most of it is the outage's wait
		place := newPlace(t)
		q := NewQueue(openDB(t, place), nil)
		started, finish := make(chan struct{}, 1), make(chan struct{})
		var runs atomic.Int32
		h := newFuncHandler("k", func(context.Context, *Job) Outcome {
			runs.Add(1)
			started <- struct{}{}
			<-finish
			return Done()
		})
		startRunner(t, q, RunnerOptions{}, h)
		job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the job never started")
		}

		unlock := lockJobs(t, place)
		close(finish) // the attempt is done; its outcome cannot be written
		time.Sleep(databaseOutage)
		unlock()

		got := waitStatus(t, q, job.ID, store.JobDone)
		if runs.Load() != 1 || got.Attempts != 1 {
			t.Errorf("the job ran %d times (attempts %d), want once", runs.Load(), got.Attempts)
		}
	})
}
