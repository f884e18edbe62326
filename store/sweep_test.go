package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// withSweepBatch makes the sweeps delete n rows a statement until t ends.
func withSweepBatch(t *testing.T, n int) {
	was := sweepBatch
	sweepBatch = n
	t.Cleanup(func() { sweepBatch = was })
}

// writeLog records the statements a store sends to its database to
// write, each time it sends one.
type writeLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *writeLog) add(stmt string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, strings.Join(strings.Fields(stmt), " "))
}

// count is how many statements sent began with prefix.
func (l *writeLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sent {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// openLoggingWrites opens a fresh store of the running test's dialect
// whose statements are logged each time they run: the SQLite writer's, or
// on PostgreSQL every statement of every pool.
func openLoggingWrites(t *testing.T) (*DB, *writeLog) {
	t.Helper()
	ctx := context.Background()
	log := &writeLog{}
	var (
		db  *DB
		err error
	)
	switch name := dialectOf(t).name; name {
	case "sqlite":
		db, err = OpenSQLite(ctx, filepath.Join(t.TempDir(), "t.db"), SQLiteOptions{observeWrites: log.add})
	case "postgres":
		db, err = OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{tracer: &statementTracer{log}})
	default:
		t.Fatalf("no logging store for dialect %s", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, log
}

type statementTracer struct{ log *writeLog }

func (s *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.log.add(d.SQL)
	return ctx
}

func (s *statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The sweeps that delete whatever is due — settled jobs past their
// retention, used nonces past their expiry — delete a backlog larger than
// a batch whole, and nothing that is not due, a batch a statement: one
// statement over the whole backlog held SQLite's one writer (and on
// PostgreSQL a transaction) for as long as it took, seconds for a
// million rows, with every issuance write waiting behind it.
func TestTheSweepsDeleteABacklogLargerThanABatchWholeABatchAStatement(t *testing.T) {
	const batch = 4
	const due = 3*batch + 1
	type seeded struct {
		kept   func() (int, error) // how many of the rows not due are there
		left   func() (int, error) // how many of the rows due are there
		notDue int
	}
	cases := []struct {
		name   string
		delete string // the sweep's statements begin so
		seed   func(t *testing.T, db *DB) seeded
		sweep  func(db *DB) (int64, error)
	}{
		{"settled jobs past their retention", "DELETE FROM jobs",
			func(t *testing.T, db *DB) seeded {
				ctx := context.Background()
				settle := func(at time.Time) int64 {
					j, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", MaxAttempts: 1}, t0)
					if err != nil {
						t.Fatal(err)
					}
					if c, err := db.ClaimJobs(ctx, "k", "a", t0, t0.Add(time.Minute), 1); err != nil || len(c) != 1 {
						t.Fatalf("claim: %v %v", c, err)
					}
					if _, err := db.CompleteJob(ctx, j.ID, "a", at); err != nil {
						t.Fatal(err)
					}
					return j.ID
				}
				var old, kept []int64
				for i := range due {
					old = append(old, settle(t0.Add(time.Duration(i)*time.Minute)))
				}
				kept = append(kept, settle(t0.Add(48*time.Hour)))
				waiting, _, err := db.EnqueueJob(ctx, NewJob{Kind: "later", MaxAttempts: 1, RunAt: t0.Add(1000 * time.Hour)}, t0)
				if err != nil {
					t.Fatal(err)
				}
				kept = append(kept, waiting.ID)
				present := func(ids []int64) (int, error) {
					n := 0
					for _, id := range ids {
						_, err := db.GetJob(ctx, id)
						switch {
						case err == nil:
							n++
						case !errors.Is(err, ErrNotFound):
							return 0, err
						}
					}
					return n, nil
				}
				return seeded{kept: func() (int, error) { return present(kept) }, left: func() (int, error) { return present(old) }, notDue: len(kept)}
			},
			func(db *DB) (int64, error) { return db.PruneJobs(context.Background(), t0.Add(24*time.Hour)) }},
		{"used nonces past their expiry", "DELETE FROM used_nonces",
			func(t *testing.T, db *DB) seeded {
				ctx := context.Background()
				// A nonce always carries the expiry it was minted with.
				expiry := map[string]time.Time{}
				use := func(nonce string, expires time.Time) {
					expiry[nonce] = expires
					if fresh, err := db.UseNonce(ctx, nonce, expires); err != nil || !fresh {
						t.Fatalf("using nonce %s: %v %v", nonce, fresh, err)
					}
				}
				var old, kept []string
				for i := range due {
					old = append(old, fmt.Sprintf("old-%d", i))
					use(old[i], t0.Add(time.Duration(i)*time.Minute))
				}
				for i := range 2 {
					kept = append(kept, fmt.Sprintf("live-%d", i))
					use(kept[i], t0.Add(48*time.Hour+time.Duration(i)*time.Minute))
				}
				// Whether a nonce is remembered, by using it again.
				present := func(nonces []string) (int, error) {
					n := 0
					for _, nonce := range nonces {
						fresh, err := db.UseNonce(ctx, nonce, expiry[nonce])
						if err != nil {
							return 0, err
						}
						if !fresh {
							n++ // still remembered as used
						}
					}
					return n, nil
				}
				return seeded{kept: func() (int, error) { return present(kept) }, left: func() (int, error) { return present(old) }, notDue: len(kept)}
			},
			func(db *DB) (int64, error) { return db.PruneNonces(context.Background(), t0.Add(24*time.Hour)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				withSweepBatch(t, batch)
				db, log := openLoggingWrites(t)
				s := c.seed(t, db)
				before := log.count(c.delete)

				n, err := c.sweep(db)
				if err != nil || n != due {
					t.Fatalf("the sweep deleted %d, %v; want the %d due", n, err, due)
				}
				if got := log.count(c.delete) - before; got < (due+batch-1)/batch {
					t.Errorf("the sweep ran %d delete statements over %d rows due; want one per batch of %d, at least %d", got, due, batch, (due+batch-1)/batch)
				}
				if left, err := s.left(); err != nil || left != 0 {
					t.Errorf("%d of the %d rows due are left (%v)", left, due, err)
				}
				if kept, err := s.kept(); err != nil || kept != s.notDue {
					t.Errorf("%d of the %d rows not due are left (%v); want all", kept, s.notDue, err)
				}
			})
		})
	}
}
