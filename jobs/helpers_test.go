package jobs

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/dialecttest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// testDialects is the table of databases every runner test runs over. A
// place is where one store lives: stores opened on one place share it,
// as processes sharing a file or a PostgreSQL database do.
var testDialects = []struct {
	name  string
	place func(t testing.TB) string
	open  func(ctx context.Context, place string) (*store.DB, error)
	// raw is sql.Open's arguments for a read-only look at place around
	// the store.
	raw func(place string) (driver, dsn string)
}{
	{"sqlite",
		func(t testing.TB) string { return filepath.Join(t.TempDir(), "jobs.db") },
		func(ctx context.Context, path string) (*store.DB, error) {
			return store.OpenSQLite(ctx, path, store.SQLiteOptions{})
		},
		func(path string) (string, string) { return "sqlite", "file:" + path + "?mode=ro" }},
	{"postgres",
		pgtest.DSN,
		func(ctx context.Context, dsn string) (*store.DB, error) {
			return store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
		},
		func(dsn string) (string, string) { return "pgx", dsn + " default_transaction_read_only=on" }},
}

// eachDialect runs body once per dialect, as subtests named after it;
// newPlace and openDB inside body use that dialect.
func eachDialect(t *testing.T, body func(t *testing.T)) {
	for _, d := range testDialects {
		t.Run(d.name, body)
	}
}

// testDialect is the dialect the running test is under (see eachDialect);
// a test outside eachDialect gets SQLite.
func testDialect(t testing.TB) int {
	names := make([]string, len(testDialects))
	for i, d := range testDialects {
		names[i] = d.name
	}
	return dialecttest.Of(t.Name(), names)
}

// newPlace makes a fresh, empty place for stores of the test's dialect.
func newPlace(t testing.TB) string {
	t.Helper()
	return testDialects[testDialect(t)].place(t)
}

// openDB opens a store on place, or on a fresh place of its own if place
// is empty.
func openDB(t testing.TB, place string) *store.DB {
	t.Helper()
	if place == "" {
		place = newPlace(t)
	}
	db, err := testDialects[testDialect(t)].open(context.Background(), place)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func startRunner(t testing.TB, q *Queue, opts RunnerOptions, hs ...Handler) *Runner {
	t.Helper()
	r, err := NewRunner(q, hs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	return r
}

// funcHandler is a Handler built from functions, recording its Abandon calls.
type funcHandler struct {
	kind  string
	run   func(ctx context.Context, job *Job) Outcome
	lease time.Duration

	// abandonErr, when set, is what each Abandon returns (after it is
	// recorded).
	abandonErr func(job *Job) error

	mu        sync.Mutex
	abandoned map[int64][]string
	abandonCh chan int64
}

func newFuncHandler(kind string, run func(ctx context.Context, job *Job) Outcome) *funcHandler {
	return &funcHandler{kind: kind, run: run, abandoned: map[int64][]string{}, abandonCh: make(chan int64, 10000)}
}

func (h *funcHandler) Kind() string                              { return h.kind }
func (h *funcHandler) Run(ctx context.Context, job *Job) Outcome { return h.run(ctx, job) }
func (h *funcHandler) Recover(context.Context, *Queue) error     { return nil }
func (h *funcHandler) Lease() time.Duration                      { return h.lease }
func (h *funcHandler) Abandon(_ context.Context, job *Job, reason string) error {
	h.mu.Lock()
	h.abandoned[job.ID] = append(h.abandoned[job.ID], reason)
	h.mu.Unlock()
	h.abandonCh <- job.ID
	if h.abandonErr != nil {
		return h.abandonErr(job)
	}
	return nil
}

func (h *funcHandler) abandons(id int64) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.abandoned[id]...)
}

// waitStatus polls the store until the job reaches status or the test's
// patience runs out. It waits on the runner's real goroutines, never on
// the job's schedule, which tests drive with a fake clock.
func waitStatus(t testing.TB, q *Queue, id int64, status store.JobStatus) Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == status {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s (attempts %d, last error %q), want %s", id, j.Status, j.Attempts, j.LastError, status)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, 10*time.Second, what, cond)
}

// waitForWithin is waitFor with a patience of its own, for tests whose real
// work (thousands of fsyncs, two processes' worth of lock contention) is
// slow on a loaded CI machine.
func waitForWithin(t testing.TB, patience time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
