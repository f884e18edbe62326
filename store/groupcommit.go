package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// maxWriteBatch bounds how many writes share one commit.
const maxWriteBatch = 128

// errClosed answers writes handed to a closed store.
var errClosed = errors.New("store: closed")

// groupCommit runs every write of the store in one goroutine, and lets the
// writes that arrive while a commit is being made durable share the next
// commit. Each write still runs in its own savepoint, so it succeeds or
// fails alone, and its caller hears back only after the commit that holds
// it is on disk: durability is unchanged, but concurrent requests pay for
// one fsync together instead of one each. With a single writer there is no
// batch and no extra latency.
type groupCommit struct {
	db       *sql.DB
	reqs     chan *writeReq
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

type writeReq struct {
	ctx  context.Context
	fn   func(*sql.Tx) error
	done chan error
}

func newGroupCommit(db *sql.DB) *groupCommit {
	g := &groupCommit{db: db, reqs: make(chan *writeReq), quit: make(chan struct{}), done: make(chan struct{})}
	go g.loop()
	return g
}

// do runs fn in a write transaction and returns once that transaction is
// committed (nil) or fn's changes are undone (fn's error).
func (g *groupCommit) do(ctx context.Context, fn func(*sql.Tx) error) error {
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
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

// commit runs a batch in one transaction, each write in a savepoint of its
// own (a batch of one needs none), and reports to every writer.
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
	tx, err := g.db.BeginTx(context.Background(), nil)
	if err != nil {
		finish(fmt.Errorf("store: begin: %w", err))
		return
	}
	if len(batch) == 1 {
		if errs[0] = runWrite(batch[0], tx); errs[0] != nil {
			_ = tx.Rollback()
			finish(nil)
			return
		}
	} else {
		for i, r := range batch {
			if _, err := tx.Exec(`SAVEPOINT w`); err != nil {
				_ = tx.Rollback()
				finish(fmt.Errorf("store: savepoint: %w", err))
				return
			}
			if errs[i] = runWrite(r, tx); errs[i] != nil {
				if _, err := tx.Exec(`ROLLBACK TO w`); err != nil {
					// The transaction cannot be trusted any more: undo it all.
					_ = tx.Rollback()
					for j := range errs[:i] {
						errs[j] = nil
					}
					finish(fmt.Errorf("store: rolling back a failed write: %w", err))
					return
				}
			}
			if _, err := tx.Exec(`RELEASE w`); err != nil {
				_ = tx.Rollback()
				finish(fmt.Errorf("store: release savepoint: %w", err))
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		finish(fmt.Errorf("store: commit: %w", err))
		return
	}
	finish(nil)
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

// writer runs single statements through the group commit, with the
// shape of *sql.DB's methods so call sites read the same.
type writer struct{ db *DB }

// ExecContext runs one statement in its own write.
func (w writer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := w.db.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = tx.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// QueryRowContext returns a row whose Scan runs the statement in its own
// write and scans inside it (a RETURNING row must be read before commit).
func (w writer) QueryRowContext(ctx context.Context, query string, args ...any) rowScanner {
	return deferredRow{w: w, ctx: ctx, query: query, args: args}
}

type deferredRow struct {
	w     writer
	ctx   context.Context
	query string
	args  []any
}

func (d deferredRow) Scan(dest ...any) error {
	return d.w.db.withTx(d.ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(d.ctx, d.query, d.args...).Scan(dest...)
	})
}

// queryEach runs a statement returning rows in its own write and calls
// each for every row before the commit.
func (w writer) queryEach(ctx context.Context, query string, args []any, each func(rowScanner) error) error {
	return w.db.withTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}
