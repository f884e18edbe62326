package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// maxCachedStmts bounds one connection's statement cache. The store has a
// few dozen statements; the bound only guards against a caller that builds
// SQL with values in it.
const maxCachedStmts = 256

// cachingConnector opens SQLite connections that keep every statement they
// have prepared, keyed by its text. modernc.org/sqlite otherwise parses
// and plans each statement again on every call, which was the largest
// single cost per ACME request in profiles. Being below database/sql, the
// cache serves every query in the store, with no change at call sites.
type cachingConnector struct {
	dsn string
	drv driver.Driver
	// observe, when set (by tests, through SQLiteOptions), is told the
	// text of every statement a connection prepares or runs uncached:
	// each distinct statement the store runs, at least once.
	observe func(query string)
	// everyRun, when set (by tests), is told the text of every statement
	// each time a connection runs it.
	everyRun func(query string)
	// gate, when set, is asked before each connection is made (see
	// gatedConnect).
	gate func() error
}

func newCachingConnector(dsn string, observe func(string)) (*cachingConnector, error) {
	probe, err := sql.Open("sqlite", "")
	if err != nil {
		return nil, fmt.Errorf("store: sqlite driver: %w", err)
	}
	drv := probe.Driver()
	_ = probe.Close()
	return &cachingConnector{dsn: dsn, drv: drv, observe: observe}, nil
}

func (c *cachingConnector) Connect(context.Context) (driver.Conn, error) {
	if c.gate != nil {
		if err := c.gate(); err != nil {
			return nil, err
		}
	}
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &cachingConn{Conn: conn, stmts: map[string]*cachedStmt{}, observe: c.observe, everyRun: c.everyRun}, nil
}

func (c *cachingConnector) Driver() driver.Driver { return c.drv }

// cachingConn is used by one goroutine at a time (database/sql's rule for
// driver connections), so its cache needs no lock.
type cachingConn struct {
	driver.Conn
	stmts    map[string]*cachedStmt
	observe  func(string)
	everyRun func(string)
}

// cachedStmt is a prepared statement and whether rows from it are open; a
// statement in use (a query nested in another's iteration) is not shared.
type cachedStmt struct {
	stmt driver.Stmt
	busy bool
}

// cached returns the statement for query, preparing it the first time; nil
// when the cached one is busy or the cache is full.
func (c *cachingConn) cached(ctx context.Context, query string) (*cachedStmt, error) {
	if cs, ok := c.stmts[query]; ok {
		if cs.busy {
			return nil, nil
		}
		return cs, nil
	}
	if c.observe != nil {
		c.observe(query)
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil, nil
	}
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{stmt: s}
	c.stmts[query] = cs
	return cs, nil
}

// statementContext is the context a statement runs under: the caller's,
// without its cancellation. The driver watches a cancellable context with
// a goroutine of its own per statement, to interrupt SQLite; the store's
// statements take microseconds, so that goroutine cost more than the
// statement. database/sql still refuses to start a statement whose
// context has ended.
func statementContext(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.everyRun != nil {
		c.everyRun(query)
	}
	ctx = statementContext(ctx)
	cs, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	}
	cs.busy = true
	defer func() { cs.busy = false }()
	return cs.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.everyRun != nil {
		c.everyRun(query)
	}
	ctx = statementContext(ctx)
	cs, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	}
	cs.busy = true
	rows, err := cs.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		cs.busy = false
		return nil, err
	}
	return &releasingRows{Rows: rows, cs: cs}, nil
}

// releasingRows frees its statement for reuse when the rows are closed.
type releasingRows struct {
	driver.Rows
	cs *cachedStmt
}

func (r *releasingRows) Close() error {
	err := r.Rows.Close()
	r.cs.busy = false
	return err
}

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.observe != nil {
		c.observe(query)
	}
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *cachingConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *cachingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *cachingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *cachingConn) Close() error {
	for _, cs := range c.stmts {
		_ = cs.stmt.Close()
	}
	return c.Conn.Close()
}
