package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// maxWriteBatch bounds how many writes share one commit.
const maxWriteBatch = 128

// errClosed answers writes handed to a closed store.
var errClosed = errors.New("store: closed")

// groupCommit runs every write of the store in one goroutine, and lets the
// writes that arrive while a commit is being made durable share the next
// commit. Each write still succeeds or fails alone (a batch with a failed
// write is run again, each write in its own savepoint), and its caller
// hears back only after the commit that holds it is on disk: durability
// is unchanged, but concurrent requests pay for one fsync together instead
// of one each. With a single writer there is no batch and no extra
// latency.
//
// A write is either durable (the default: committed with the store's
// synchronous setting, FULL unless configured otherwise) or lazy: a batch
// of lazy writes only is committed with synchronous=NORMAL, which in WAL
// mode appends to the log without an fsync. A lazy commit survives a crash
// of the process (the log is in the OS's hands) but not of the machine —
// until the next durable commit, whose fsync of the log makes everything
// before it durable too, since the log is replayed as a prefix. So a lazy
// write is as durable as every durable write that follows it. That is what
// a used nonce needs: a request's own effects are committed after its
// nonce, so a nonce can only be forgotten (by a power loss) together with
// every effect of its request.
type groupCommit struct {
	db         *sql.DB
	reqs       chan *writeReq
	quit       chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
	syncPragma string // the store's synchronous setting, for durable commits
	// lazySet is whether the connection was last switched to
	// synchronous=NORMAL; only the loop goroutine touches it.
	lazySet bool
	// observe, when set (by tests, before the first write), is told of
	// every commit: how many writes it held and whether it was lazy.
	observe func(writes int, lazy bool)
	// observeHold, when set (by tests, before the first write), is told
	// how long each commit held the writer, from its BEGIN to the end of
	// its COMMIT, and how many writes it held.
	observeHold func(writes int, d time.Duration)
}

type writeReq struct {
	ctx  context.Context
	fn   func(*sql.Tx) error
	lazy bool
	done chan error
}

// newGroupCommit starts the writer of db, whose connection opens with
// synchronous=syncPragma.
func newGroupCommit(db *sql.DB, syncPragma string) *groupCommit {
	g := &groupCommit{db: db, reqs: make(chan *writeReq), quit: make(chan struct{}), done: make(chan struct{}), syncPragma: syncPragma}
	go g.loop()
	return g
}

// do runs fn in a write transaction and returns once that transaction is
// committed (nil) or fn's changes are undone (fn's error). A lazy write's
// commit may skip the fsync: see groupCommit.
func (g *groupCommit) do(ctx context.Context, fn func(*sql.Tx) error, lazy bool) error {
	r := &writeReq{ctx: ctx, fn: fn, lazy: lazy, done: make(chan error, 1)}
	select {
	case g.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.quit:
		return errClosed
	}
	// Once handed over the write may commit, so wait for its outcome even
	// if ctx ends: the caller must not be told "cancelled" about a write
	// that happened.
	return <-r.done
}

func (g *groupCommit) stop() {
	g.stopOnce.Do(func() { close(g.quit) })
	<-g.done
}

func (g *groupCommit) loop() {
	defer close(g.done)
	batch := make([]*writeReq, 0, maxWriteBatch)
	for {
		select {
		case r := <-g.reqs:
			batch = append(batch[:0], r)
		case <-g.quit:
			return
		}
		// The writer was woken by the first write's caller; let the
		// goroutines that are ready to run (other requests, about to
		// write) run first, so that their writes join this commit instead
		// of each paying for the next: under load, fewer commits share
		// more pages and fsyncs (BenchmarkIssuanceWrites/clients=8: 3.7
		// -> 2.1 commits per certificate). With nothing else to run it
		// returns at once, and every caller is still answered only after
		// the commit that holds its write.
		runtime.Gosched()
	fill:
		for len(batch) < maxWriteBatch {
			select {
			case r := <-g.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		g.commit(batch)
	}
}

// commit runs a batch in one transaction and reports to every writer.
// The writes run one after the other, with no savepoints: a savepoint
// makes SQLite copy every page a write changes into its sub-journal, which
// spills to a temporary file past 64 KiB (a new order's write alone
// changes more), and that copying was a third of the writer's page writes.
// Should one of them fail, the batch is undone and run again, each write
// in a savepoint of its own (runAlone), so that it fails alone: write
// closures may run more than once (see engine).
func (g *groupCommit) commit(batch []*writeReq) {
	errs := make([]error, len(batch))
	finish := func(commitErr error) {
		for i, r := range batch {
			if errs[i] == nil && commitErr != nil {
				errs[i] = commitErr
			}
			r.done <- errs[i]
		}
	}
	lazy := allLazy(batch)
	if err := g.setLazy(lazy); err != nil {
		finish(err)
		return
	}
	start := time.Now()
	tx, err := g.db.BeginTx(context.Background(), nil)
	if err != nil {
		finish(fmt.Errorf("store: begin: %w", err))
		return
	}
	failed := false
	for i, r := range batch {
		if errs[i] = runWrite(r, tx); errs[i] != nil {
			failed = true
			break
		}
	}
	if failed {
		_ = tx.Rollback()
		if len(batch) == 1 {
			finish(nil) // the write failed alone already
			return
		}
		clear(errs)
		if tx, err = g.db.BeginTx(context.Background(), nil); err != nil {
			finish(fmt.Errorf("store: begin: %w", err))
			return
		}
		if err := runAlone(tx, batch, errs); err != nil {
			_ = tx.Rollback()
			clear(errs)
			finish(err)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		finish(fmt.Errorf("store: commit: %w", err))
		return
	}
	if g.observe != nil {
		g.observe(len(batch), lazy)
	}
	if g.observeHold != nil {
		g.observeHold(len(batch), time.Since(start))
	}
	finish(nil)
}

// runAlone runs a batch in tx, each write in a savepoint of its own, and
// keeps each write's error in errs; a write that fails is undone alone.
// An error of its own means tx cannot be trusted any more.
func runAlone(tx *sql.Tx, batch []*writeReq, errs []error) error {
	for i, r := range batch {
		if _, err := tx.Exec(`SAVEPOINT w`); err != nil {
			return fmt.Errorf("store: savepoint: %w", err)
		}
		if errs[i] = runWrite(r, tx); errs[i] != nil {
			if _, err := tx.Exec(`ROLLBACK TO w`); err != nil {
				return fmt.Errorf("store: rolling back a failed write: %w", err)
			}
		}
		if _, err := tx.Exec(`RELEASE w`); err != nil {
			return fmt.Errorf("store: release savepoint: %w", err)
		}
	}
	return nil
}

func allLazy(batch []*writeReq) bool {
	for _, r := range batch {
		if !r.lazy {
			return false
		}
	}
	return true
}

// setLazy switches the writer connection between synchronous=NORMAL (lazy)
// and the store's own setting, when it changes. SQLite refuses the switch
// inside a transaction, so it happens between batches. Should the pool
// ever reopen the connection, it opens with the store's setting, which is
// never less durable than the one believed set.
func (g *groupCommit) setLazy(lazy bool) error {
	if g.syncPragma != "FULL" || lazy == g.lazySet {
		return nil
	}
	mode := g.syncPragma
	if lazy {
		mode = "NORMAL"
	}
	if _, err := g.db.Exec(`PRAGMA synchronous = ` + mode); err != nil {
		return fmt.Errorf("store: setting synchronous=%s: %w", mode, err)
	}
	g.lazySet = lazy
	return nil
}

// runWrite runs one write, turning a cancelled caller or a panic into its
// error.
func runWrite(r *writeReq, tx *sql.Tx) (err error) {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("store: write panicked: %v", p)
		}
	}()
	return r.fn(tx)
}
