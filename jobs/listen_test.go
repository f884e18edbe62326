package jobs

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// A PostgreSQL restart cuts the connection a runner listens for other
// instances' enqueues on. The runner connects again once the database is
// back and is woken by the next announcement as before: its hour-long
// poll on a fake clock never fires, so only a listening connection made
// after the restart can start the job. (Not parallel: it stops the
// binary's cluster.)
func TestARunnerListensAgainAfterPostgreSQLRestarts(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		place := newPlace(t)
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, place), clk)
		other := NewQueue(openDB(t, place), clk)
		ran := make(chan struct{}, 1)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { ran <- struct{}{}; return Done() })
		startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: time.Hour}, h)

		listening := listeningAt(ctx, t, place)
		waitFor(t, "the runner to listen for jobs", listening)

		pgtest.Stop(t)
		pgtest.Start(t)
		waitForWithin(t, 30*time.Second, "the runner to listen again after the restart", listening)

		// The other instance's pool finds its connections cut too; its
		// first write after the restart may fail with them.
		waitForWithin(t, 30*time.Second, "an enqueue in the other instance", func() bool {
			_, _, err := other.Enqueue(ctx, Spec{Kind: "k"})
			return err == nil
		})
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("the job enqueued in another instance after the restart did not start")
		}
	})
}

// listeningAt reports, each time it is called, whether exactly one
// connection to the PostgreSQL database at place waits idle in LISTEN:
// the one runner of a test has subscribed to announcements.
func listeningAt(ctx context.Context, t *testing.T, place string) func() bool {
	t.Helper()
	raw, err := sql.Open(testDialects[testDialect(t)].raw(place))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return func() bool {
		var n int
		err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %' AND state = 'idle'`).Scan(&n)
		return err == nil && n == 1
	}
}
