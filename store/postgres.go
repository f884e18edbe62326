package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgresOptions tunes a PostgreSQL store. The zero value is a safe
// default.
type PostgresOptions struct {
	// MaxConns bounds the write pool; reads have a pool of the same size.
	// Default 8.
	MaxConns int

	// RequireEmpty refuses, untouched, a database that holds any row of
	// any table (ErrTargetNotEmpty) before its schema is brought up to
	// date: a copy's target (CopyStore), where a mistyped DSN naming a
	// live database must not upgrade that database's schema under the
	// instances running on it.
	RequireEmpty bool

	// tracer, for the package's tests, sees every statement of every pool.
	tracer pgx.QueryTracer
}

// OpenPostgres connects to the PostgreSQL database named by dsn (a URL or
// key=value string, as libpq takes), brings its schema up to date, and
// returns the store. A database whose schema is newer than this binary is
// refused (ErrSchemaTooNew) and left untouched. The DSN may hold a
// password: no message of the store repeats it, nor the DSN itself; the
// store names itself by host and database only.
func OpenPostgres(ctx context.Context, dsn string, opts PostgresOptions) (*DB, error) {
	db, err := PreparePostgres(dsn, opts)
	if err != nil {
		return nil, err
	}
	return open(ctx, db)
}

// PreparePostgres builds the closed store of the PostgreSQL database dsn
// names (see DB and OpenPostgres): the DSN is parsed, and no connection is
// made until Check or Open.
func PreparePostgres(dsn string, opts PostgresOptions) (*DB, error) {
	if passwordCutURL(dsn) {
		// It would parse, with the password's pieces as host, port and
		// database, which every message naming the store repeats.
		return nil, errors.New("store: the postgres DSN does not parse: an '@' in its database name (a password with '/' in a postgres:// URL?); percent-encode the password (/ as %2F) or leave it out and set PGPASSWORD")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's error quotes the DSN (password masked); ours does not
		// quote it at all.
		return nil, errors.New("store: the postgres DSN does not parse; expected a URL (postgres://user@host/db) or keywords (host=HOST dbname=DB)")
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 8
	}
	// A connection attempt to a server that accepts and says nothing (or
	// a path that drops packets) would wait forever: every pool's dial,
	// and the start's ping, are bounded unless the DSN says otherwise.
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	desc := PostgresDescription(cfg)
	cfg.Tracer = opts.tracer
	// Every commit is durable unless a lazy write says otherwise (see
	// postgresEngine), whatever the server's default.
	cfg.RuntimeParams["synchronous_commit"] = "on"
	cfg.RuntimeParams["application_name"] = "caddy-acme-proxy"
	connectable := new(atomic.Bool)
	pool := func(cfg *pgx.ConnConfig) *sql.DB {
		p := sql.OpenDB(gatedConnector{Connector: stdlib.GetConnector(*cfg), desc: desc, gate: func() error { return gatedConnect(connectable, desc) }})
		p.SetMaxOpenConns(opts.MaxConns)
		p.SetMaxIdleConns(opts.MaxConns)
		p.SetConnMaxIdleTime(5 * time.Minute)
		return p
	}
	// The write pools' sessions: every transaction READ COMMITTED (see
	// postgresEngine), whatever the server's default, so that a statement
	// that is a write of its own needs no BEGIN around it; the lazy pool's
	// commits are lazy by default, so that a lazy write needs no SET LOCAL
	// (each a round trip fewer).
	wcfg := cfg.Copy()
	wcfg.RuntimeParams["default_transaction_isolation"] = "read committed"
	lcfg := wcfg.Copy()
	lcfg.RuntimeParams["synchronous_commit"] = "off"
	w, lw, r := pool(wcfg), pool(lcfg), pool(cfg.Copy())
	prepare := func(ctx context.Context) error {
		pingCtx, cancel := context.WithTimeout(ctx, 2*cfg.ConnectTimeout)
		defer cancel()
		connectable.Store(true)
		if err := w.PingContext(pingCtx); err != nil {
			connectable.Store(false)
			return fmt.Errorf("store: connecting to %s: %w", desc, redactConnectError(err))
		}
		if opts.RequireEmpty {
			if err := checkEmpty(ctx, r); err != nil {
				connectable.Store(false)
				return fmt.Errorf("%s: %w", desc, err)
			}
		}
		return nil
	}
	check := func(ctx context.Context) error { return checkPostgres(ctx, cfg, desc) }
	e := &postgresEngine{w: w, lazy: lw, cfg: cfg, desc: desc,
		wTurn: make(turns, opts.MaxConns), lazyTurn: make(turns, opts.MaxConns)}
	return newDB(r, e, postgresDialect{}, desc, connectable, prepare, check), nil
}

// gatedConnector is a pool's connector that asks gate before it connects
// (see gatedConnect). The connections are pgx's own; a connection that
// fails names the database as desc does (see connectError).
type gatedConnector struct {
	driver.Connector
	desc string
	gate func() error
}

func (c gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := c.gate(); err != nil {
		return nil, err
	}
	conn, err := c.Connector.Connect(ctx)
	if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return nil, connectError{desc: c.desc, ce: ce}
	}
	return conn, err
}

// connectError is a pool's failed connection (the server gone after the
// store opened), which the runner and the ACME front log: it says the
// reason and names the database by host and database (desc), where
// pgconn's ConnectError names the DSN's user. It unwraps to that error,
// which makes it unavailable (postgresDialect.unavailable).
type connectError struct {
	desc string
	ce   *pgconn.ConnectError
}

func (e connectError) Error() string {
	return "connecting to " + e.desc + ": " + redactConnectError(e.ce).Error()
}

func (e connectError) Unwrap() error { return e.ce }

// checkPostgres is Check's look at a PostgreSQL database, on a connection
// of its own that reads and is closed: that the server answers, and that
// the schema is not newer than this binary (the schema table found as
// the migrations find it, on the search path).
func checkPostgres(ctx context.Context, cfg *pgx.ConnConfig, desc string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return fmt.Errorf("store: connecting to %s: %w", desc, redactConnectError(err))
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("store: reading the schema of %s: %w", desc, err)
	}
	if !exists {
		return nil // no schema yet: Open creates it
	}
	var have *int64
	if err := conn.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("store: reading the schema version of %s: %w", desc, err)
	}
	if known := len(postgresDialect{}.migrations()); have != nil && int(*have) > known {
		return tooNew(desc, int(*have), known)
	}
	return nil
}

// checkEmpty fails with ErrTargetNotEmpty when a table of the database's
// current schema holds a row (schema_migrations aside: a database a copy
// that failed left migrated is still empty).
func checkEmpty(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'
		ORDER BY table_name`)
	if err != nil {
		return fmt.Errorf("store: listing the tables: %w", err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return fmt.Errorf("store: listing the tables: %w", err)
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: listing the tables: %w", err)
	}
	for _, t := range tables {
		var has bool
		if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{t}.Sanitize()+`)`).Scan(&has); err != nil {
			return fmt.Errorf("store: reading table %s: %w", t, err)
		}
		if has {
			return fmt.Errorf("%w: table %s holds rows", ErrTargetNotEmpty, t)
		}
	}
	return nil
}

// passwordCutURL reports a postgres:// URL whose database name holds a
// raw '@': libpq, and pgx after it, look for the '@' that ends the user
// and password only up to the first '/', so a password with a '/' (such
// as "1234/abc" or "/abc") ends them there, and what follows is read as
// host, port and a database name holding the rest of the password and
// the real host. (A database name with an '@' is written %40.)
func passwordCutURL(dsn string) bool {
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "postgres://")
	}
	if !ok {
		return false
	}
	i := strings.IndexAny(rest, "@/")
	if i < 0 || rest[i] == '@' {
		return false // the user and password, if any, end before the path
	}
	path, _, _ := strings.Cut(rest[i:], "?")
	return strings.Contains(path, "@")
}

// DefaultConnectTimeout bounds a connection attempt to PostgreSQL when the
// DSN sets no connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// PostgresDescription names a PostgreSQL database for messages: host and
// database, never user, password or options.
func PostgresDescription(cfg *pgx.ConnConfig) string {
	host := cfg.Host
	if strings.HasPrefix(host, "/") {
		host = "unix:" + host
	} else if cfg.Port != 0 && cfg.Port != 5432 {
		host += ":" + strconv.Itoa(int(cfg.Port))
	}
	return "postgres " + host + "/" + cfg.Database
}

// redactConnectError keeps the reason a connection failed without the
// connection's parameters (pgconn's ConnectError names user and
// database; the description already names what may be named).
func redactConnectError(err error) error {
	if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok && ce.Unwrap() != nil {
		return ce.Unwrap()
	}
	return err
}

// postgresEngine is PostgreSQL's write engine: a pool, each write its own
// transaction, READ COMMITTED. The store's writes keep their invariants at
// that level without SERIALIZABLE's predicate locks (which cost the
// backends CPU on every read and, while the tables are small and their
// rows share index pages, failed unrelated writes with serialization
// failures), because each is one of these (every write transaction of the
// package says which in its doc comment):
//
//   - a guarded statement (UPDATE … WHERE status = …, an upsert, INSERT …
//     ON CONFLICT): PostgreSQL re-checks the guard on the newest version
//     of each row it changes, after waiting for a concurrent writer of that
//     row, so of two racing writers one finds the guard false;
//   - a guarded statement first, whose row lock then orders the rest of
//     the transaction behind any concurrent writer of that row;
//   - a read that decides a write, taken after the rows it depends on are
//     locked (dialect.rowLock, or an upsert that locks the row it may
//     create): each statement of a READ COMMITTED transaction sees what
//     was committed before it began, so a read after the lock sees the
//     work of every writer that held it before.
//
// A write that loses a race anyway (a deadlock between two that lock the
// same rows in another order; a serialization failure, should a write
// ever run at a stricter level) is run again from the start, so fn must
// be re-runnable, as every store write is: it only touches its tx and
// variables it sets afresh.
//
// A lazy write commits with synchronous_commit = off (its pool's
// session setting): COMMIT returns before its WAL is flushed. It cannot outlive a durable write
// that follows it: the WAL is replayed as a prefix, and the durable
// commit flushes the WAL up to its own record, the lazy one's included.
// That is the same argument as SQLite's lazy commits (see groupCommit).
type postgresEngine struct {
	w, lazy *sql.DB         // durable and lazy writes
	cfg     *pgx.ConnConfig // for watchJobs' connection of its own
	desc    string
	// wTurn and lazyTurn admit the writes to w and lazy in the order they
	// come, as many at once as the pool has connections (see turns).
	wTurn, lazyTurn turns
}

func (e *postgresEngine) pool(lazy bool) *sql.DB {
	if lazy {
		return e.lazy
	}
	return e.w
}

// turn waits for a turn at the pool of a lazy or durable write; the
// caller gives it back with leave once its connection is back in the pool.
func (e *postgresEngine) turn(ctx context.Context, lazy bool) (turns, error) {
	t := e.wTurn
	if lazy {
		t = e.lazyTurn
	}
	return t, t.enter(ctx)
}

// turns hands a pool's connections to the writes waiting for one in the
// order they asked: a channel's blocked senders are served first come,
// first served, where database/sql gives a freed connection to a random
// waiter (connRequestSet.TakeRandom), so that under load a write could
// wait behind any number of later ones, and a certificate's latency with
// it. Its capacity is the pool's size, so the pool itself never has a
// waiter.
type turns chan struct{}

func (t turns) enter(ctx context.Context) error {
	select {
	case t <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t turns) leave() { <-t }

// jobsChannel is the LISTEN/NOTIFY channel of enqueued jobs.
const jobsChannel = "acme_proxy_jobs"

// listenQuiet is how long the listening connection may stay silent before
// it is asked for a round trip, and listenAnswer how long that round trip
// may take before the connection is given up and replaced. A connection
// whose peer vanished without closing it (a host gone, a firewall's or
// NAT's entry dropped) otherwise errs only when TCP keepalive gives up,
// many minutes later, and meanwhile other instances' enqueues wake no
// runner here: their jobs wait for its poll. (Variables for the tests.)
var (
	listenQuiet  = 30 * time.Second
	listenAnswer = 10 * time.Second
)

// watchJobs LISTENs on a connection of its own, reconnecting after a
// second when it is lost or stops answering; after each (re)connection it
// wakes every kind, for the announcements it may have missed.
func (e *postgresEngine) watchJobs(ctx context.Context, wake func(kind string)) {
	for ctx.Err() == nil {
		e.listen(ctx, wake)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (e *postgresEngine) listen(ctx context.Context, wake func(kind string)) {
	conn, err := pgx.ConnectConfig(ctx, e.cfg.Copy())
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `LISTEN `+jobsChannel); err != nil {
		return
	}
	wake("")
	for {
		quiet, cancel := context.WithTimeout(ctx, listenQuiet)
		n, err := conn.WaitForNotification(quiet)
		cancel()
		switch {
		case err == nil:
			wake(n.Payload)
		case ctx.Err() == nil && quiet.Err() != nil:
			// Nothing for a while: a wait cut by its own deadline leaves
			// the connection usable (pgconn's default context handler
			// sets a read deadline, it does not close). Does the server
			// still answer on it?
			answer, cancel := context.WithTimeout(ctx, listenAnswer)
			err := conn.Ping(answer)
			cancel()
			if err != nil {
				return
			}
		default:
			return
		}
	}
}

// A write that lost a race is run again after a random pause that grows
// with each attempt, up to retryPauseMax, for as long as retryFor (or
// until its context ends). Run again at once, the losers of one race meet
// again: when writes were serializable, with eight clients issuing at
// once, twenty immediate runs of a challenge's result were seen to lose
// every time (the request got a 500), since PostgreSQL keeps serializable
// read locks on the few index pages a small table's rows share. READ
// COMMITTED writes lose only to deadlocks, which the pause spreads out
// the same way.
const (
	retryFor      = 10 * time.Second
	retryPauseMin = 200 * time.Microsecond
	retryPauseMax = 50 * time.Millisecond
)

func (e *postgresEngine) do(ctx context.Context, fn func(*sql.Tx) error, lazy bool) error {
	return retrying(ctx, func() error { return e.once(ctx, fn, lazy) })
}

// exec runs one statement as a write of its own, without a transaction
// around it: PostgreSQL runs it as one, READ COMMITTED (see OpenPostgres),
// in one round trip instead of three. It is retried as do retries.
func (e *postgresEngine) exec(ctx context.Context, lazy bool, query string, args []any) (res sql.Result, err error) {
	err = retrying(ctx, func() error {
		t, err := e.turn(ctx, lazy)
		if err != nil {
			return err
		}
		defer t.leave()
		res, err = e.pool(lazy).ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// queryRow is exec for a statement returning one row, scanned into dest.
func (e *postgresEngine) queryRow(ctx context.Context, lazy bool, query string, args []any, dest ...any) error {
	return retrying(ctx, func() error {
		t, err := e.turn(ctx, lazy)
		if err != nil {
			return err
		}
		defer t.leave()
		return e.pool(lazy).QueryRowContext(ctx, query, args...).Scan(dest...)
	})
}

// retrying runs a write (run) until it does not lose a race, as long as
// retryFor allows.
func retrying(ctx context.Context, run func() error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		err := run()
		if err == nil || !retryable(err) || time.Since(start) >= retryFor || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(retryPause(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// retryPause is the pause before run attempt+2 of a write: uniform in
// (0, d], d doubling from retryPauseMin to retryPauseMax, so that the
// losers of one race spread out.
func retryPause(attempt int) time.Duration {
	d := min(retryPauseMin<<min(attempt, 16), retryPauseMax)
	return rand.N(d) + 1
}

func (e *postgresEngine) once(ctx context.Context, fn func(*sql.Tx) error, lazy bool) error {
	t, err := e.turn(ctx, lazy)
	if err != nil {
		return err
	}
	defer t.leave()
	tx, err := e.pool(lazy).BeginTx(ctx, nil) // the session's READ COMMITTED
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// retryable: serialization_failure and deadlock_detected, which
// PostgreSQL asks the client to answer by running the transaction again;
// and a statement that never reached the server (pgconn.SafeToRetry): a
// pooled connection the server closed under it (a restart) is found
// closed only as a statement is sent, and database/sql runs that
// statement again on another connection for a statement of its own
// (pgx answers it driver.ErrBadConn), but not for a transaction's BEGIN.
// Run again, the write takes a new connection: it succeeds, or fails
// connecting while the server is away (unavailable).
func retryable(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return pgconn.SafeToRetry(err)
}

func (e *postgresEngine) close() error { return errors.Join(e.w.Close(), e.lazy.Close()) }

type postgresDialect struct{}

func (postgresDialect) name() string            { return "postgres" }
func (postgresDialect) migrations() []migration { return postgresMigrations }

// rebound remembers rebind's answers: every request runs a dozen
// statements, nearly all constants, and numbering each anew cost 1 % of
// Caddy's CPU at 8 clients (a string built and scanned per statement).
// At most rebindCacheMax statements of at most rebindCacheLen bytes are
// kept, so statements built at run time (a search's filters, a batch of
// rows) cannot grow it without bound; the others are numbered each time.
var (
	rebound     sync.Map // statement → numbered statement
	reboundSize atomic.Int64
)

const (
	rebindCacheMax = 1024
	rebindCacheLen = 4096
)

// rebind numbers the ? placeholders $1, $2, …, leaving ? inside quoted
// strings and identifiers alone.
func (postgresDialect) rebind(stmt string) string {
	if !strings.Contains(stmt, "?") {
		return stmt
	}
	if got, ok := rebound.Load(stmt); ok {
		return got.(string)
	}
	numbered := numberPlaceholders(stmt)
	if len(stmt) <= rebindCacheLen && reboundSize.Load() < rebindCacheMax {
		if _, loaded := rebound.LoadOrStore(stmt, numbered); !loaded {
			reboundSize.Add(1)
		}
	}
	return numbered
}

func numberPlaceholders(stmt string) string {
	var b strings.Builder
	b.Grow(len(stmt) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(stmt); i++ {
		c := stmt[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unavailable: class 53 (insufficient resources: disk full, out of
// memory, too many connections), a read-only transaction (a standby, or
// default_transaction_read_only), the server shutting down or not yet
// accepting connections, no connection at all, and a connection lost in
// the middle of a statement — a backend that crashed or was killed (the
// server then restarts every session), an immediate shutdown, a reset on
// the way — which pgx reports as io.ErrUnexpectedEOF or the socket's
// error, with no PostgreSQL error code.
func (postgresDialect) unavailable(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "08"),
			pe.Code == "25006", pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
			return true
		}
		return false
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (postgresDialect) uniqueViolation(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "23505"
}

// claimJobs locks the rows it picks FOR UPDATE SKIP LOCKED, so that
// concurrent claimers in other pools and instances each take other jobs
// instead of queueing behind one another. A row another claimer changed
// after the statement's snapshot is not taken twice: locking it, the
// subquery re-checks its WHERE on the row's newest version (which another
// claim made running under a live lease), and a row it has locked no one
// else changes before the update commits.
//
// The due jobs and the owed abandons are one select (FOR UPDATE takes no
// UNION), the abandons first; the planner finds each side by its index
// (jobs_due, the partial jobs_abandon_owed) and ORs the two.
func (postgresDialect) claimJobs(cols, lanes string) string {
	return `UPDATE jobs
		SET status = CASE WHEN status = 'cancelled' THEN status ELSE 'running' END,
		    attempts = CASE WHEN status = 'cancelled' THEN attempts ELSE attempts + 1 END,
		    rerun_at = NULL,
		    lease_owner = ?, lease_until = ?, updated_at = ?
		WHERE id IN (
			SELECT id FROM jobs
			WHERE (kind = ? AND status IN ('ready','running') AND lane IN (` + lanes + `) AND ((status = 'ready' AND run_at <= ?) OR (status = 'running' AND lease_until <= ? AND lease_owner <> ?)))
			   OR (` + abandonOwedWhere(lanes) + `)
			ORDER BY abandon_owed DESC, run_at, id
			LIMIT ?
			FOR UPDATE SKIP LOCKED)
		RETURNING ` + cols
}

// reclaimStuckOrders: as claimJobs, the pick skips rows another
// transaction holds, and the outer guard re-checks the rest.
func (postgresDialect) reclaimStuckOrders(cols, pick string) string {
	return `UPDATE orders SET updated_at = ?, claimed_by = ?
		WHERE id IN (SELECT id FROM orders WHERE profile = ? AND status = 'processing' AND ` + pick + `
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE kind = ? AND key = orders.id AND status IN ('ready','running'))
			AND NOT EXISTS (SELECT 1 FROM jobs WHERE kind = ? AND key = orders.id AND abandon_owed = 1) LIMIT ? FOR UPDATE SKIP LOCKED)
		AND status = 'processing' AND ` + pick + `
		RETURNING ` + cols
}

// serverClock: clock_timestamp is the time the statement reads it, not
// the start of its transaction (now()).
func (postgresDialect) serverClock() string { return `SELECT clock_timestamp()` }

// announceJob notifies the jobs channel; PostgreSQL delivers it when the
// enqueuing transaction commits, and not if it rolls back.
func (postgresDialect) announceJob() string {
	return `SELECT pg_notify('` + jobsChannel + `', ?)`
}

// rowLock: FOR UPDATE, held until the transaction ends; a concurrent
// writer of the row (or locker) waits for it, and a locker that waited
// takes the row's newest version.
func (postgresDialect) rowLock() string { return ` FOR UPDATE` }

func (postgresDialect) shareLock() string { return ` FOR SHARE` }

// spendNonceAs spends the nonce in a data-modifying WITH and reads the
// account in the statement around it (one snapshot; the insert's
// conflict with a used key is decided as in a statement of its own); the
// account by its key alone (see "Rows read by their key" in dialect.go).
func (postgresDialect) spendNonceAs() string {
	return `WITH spent AS (` + spendNonce + ` RETURNING 1)
		SELECT COALESCE(a.id, ''), COALESCE(a.profile, ''), COALESCE(a.key_thumbprint, ''), COALESCE(a.key_jwk, ''),
			COALESCE(a.status, ''), COALESCE(a.contact, '[]'), COALESCE(a.tos_agreed, 0), COALESCE(a.created_at, 0),
			COALESCE(a.eab_kid, ''), COALESCE(a.eab_label, ''),
			EXISTS (SELECT 1 FROM spent), a.id IS NOT NULL
		FROM (SELECT 1) AS one LEFT JOIN accounts a ON (a.profile = ?) IS TRUE AND a.id = ?`
}

// issueOrder moves the order in a data-modifying WITH, and writes the
// certificate, the audit row and the spends (issueSpendCTEs) from its
// RETURNING row, so that they are written only when the order moved. The
// parameters of an INSERT … SELECT take no type from its columns: each is
// cast to its column's. The texts of none and one spend are built once.
// The order by its key alone (see "Rows read by their key" in dialect.go).
func (postgresDialect) issueOrder(spends int) string {
	if spends < len(pgIssueOrder) {
		return pgIssueOrder[spends]
	}
	return issueOrderSQL(spends)
}

var pgIssueOrder = [2]string{issueOrderSQL(0), issueOrderSQL(1)}

func issueOrderSQL(spends int) string {
	return `WITH o AS (
			UPDATE orders SET status = 'valid', certificate_id = ?, updated_at = ? WHERE id = ? AND (status = 'processing') IS TRUE RETURNING id),
		c AS (
			INSERT INTO certificates
				(id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, created_at, issuer_key_id, alternate_chains)
			SELECT ?::text, o.id, ?::text, ?::text, ?::text, ?::text, ?::bytea, ?::bigint, ?::bigint, ?::bigint, ?::text, ?::text FROM o),
		a AS (
			INSERT INTO audit_events (` + auditInsertCols + `)
			SELECT ?::bigint, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text,
				?::text, ?::text, ?::text, ?::text, ?::text FROM o)` + issueSpendCTEs(spends) + `
		SELECT COUNT(*) FROM o`
}

// insertsInWith: yes (see insertOrderAtOnce).
func (postgresDialect) insertsInWith() bool { return true }

func (postgresDialect) crlLateRows() (mark, late string) {
	return `SELECT pg_current_snapshot()::text`,
		// The rows of transactions the marked snapshot did not see lie
		// at or above its xmin, by revocations_tx; the id is only
		// checked on them (IS TRUE: see "Rows read by their key").
		`SELECT EXISTS (SELECT 1 FROM revocations
			WHERE issuer_key_id = ? AND tx IS NOT NULL AND tx >= (SELECT pg_snapshot_xmin(CAST(? AS pg_snapshot))::text::bigint)
			AND (id <= ?) IS TRUE AND NOT pg_visible_in_snapshot(tx::text::xid8, CAST(? AS pg_snapshot)))`
}

// crlStaleRows: PostgreSQL takes ids at insert and commits rows in any
// order, so a CRL lists the rows its read's snapshot (c.mark) saw, and a
// row is off it when that snapshot did not see its transaction: a row
// above the CRL's ledger_seq, or one below it that committed late. Such
// rows lie at or above the snapshot's xmin, by revocations_tx, in its
// order (asked as EXISTS, the planner reads the whole ledger for the
// first match instead): the rows written since the read began, few. A
// CRL stored without a mark (before migration crls_mark, or copied from
// SQLite by migrate-store) counts as stale: it is built once more, and
// stored with one.
func (postgresDialect) crlStaleRows() string {
	return `(c.mark IS NULL OR (SELECT 1 FROM revocations r
			WHERE r.issuer_key_id = cas.k AND r.tx IS NOT NULL
			AND r.tx >= pg_snapshot_xmin(CAST(c.mark AS pg_snapshot))::text::bigint
			AND NOT pg_visible_in_snapshot(r.tx::text::xid8, CAST(c.mark AS pg_snapshot))
			ORDER BY r.tx LIMIT 1) IS NOT NULL)`
}

// lockForMigration makes concurrent openers of one database migrate one
// after the other: the lock is the transaction's, released at its end.
// The transaction is READ COMMITTED (made so explicitly, whatever the
// session's default), so that each statement after the lock sees what an
// opener that held it before committed (a serializable snapshot would be
// taken by the lock's SELECT itself, before the wait, and miss it).
func (postgresDialect) lockForMigration(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `SET TRANSACTION ISOLATION LEVEL READ COMMITTED`); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7346952815537061)`)
	return err
}
