package store

import (
	"context"
	"database/sql"
)

// writer runs single statements through the engine, each a write of its
// own, with the shape of *sql.DB's methods so call sites read the same. A
// lazy writer's statements are lazy writes (see engine).
type writer struct {
	db   *DB
	lazy bool
}

func (w writer) withTx(ctx context.Context, fn func(*sql.Tx) error) error {
	if w.lazy {
		return w.db.withLazyTx(ctx, fn)
	}
	return w.db.withTx(ctx, fn)
}

// stmtEngine is an engine that runs one statement as a write of its own
// more cheaply than in a transaction of its own (see postgresEngine.exec);
// the writer's statements go there when the engine is one.
type stmtEngine interface {
	exec(ctx context.Context, lazy bool, query string, args []any) (sql.Result, error)
	queryRow(ctx context.Context, lazy bool, query string, args []any, dest ...any) error
}

// ExecContext runs one statement in its own write.
func (w writer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if se, ok := w.db.eng.(stmtEngine); ok {
		res, err := se.exec(ctx, w.lazy, query, args)
		return res, w.db.unavailable(err)
	}
	var res sql.Result
	err := w.withTx(ctx, func(tx *sql.Tx) error {
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
	if se, ok := d.w.db.eng.(stmtEngine); ok {
		return d.w.db.unavailable(se.queryRow(d.ctx, d.w.lazy, d.query, d.args, dest...))
	}
	return d.w.withTx(d.ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(d.ctx, d.query, d.args...).Scan(dest...)
	})
}

// queryEach runs a statement returning rows in its own write and calls
// each for every row before the commit. The write may run more than once
// (see engine): restart is called before each run, to drop what each
// gathered from a run that was undone.
func (w writer) queryEach(ctx context.Context, query string, args []any, restart func(), each func(rowScanner) error) error {
	return w.withTx(ctx, func(tx *sql.Tx) error {
		restart()
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
