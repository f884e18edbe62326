package store

import (
	"context"
	"database/sql"
)

// Rows read by their key. A statement that reaches one row by its key —
// an order, account or challenge by id, an order moved from one status to
// the next — writes every other condition on that row as a boolean test,
// `(profile = ?) IS TRUE`, `(status = 'ready') IS TRUE`, which PostgreSQL
// never makes into an index condition: the key's index is then the only one
// its plan can reach the row through. Written plainly, a connection's
// generic plan (kept for as long as the connection lives, until the
// table's next ANALYZE) is chosen on a new database's tables that have no
// statistics yet, where an index led by the other column looks as cheap as
// the key's — orders_profile_created for `profile = ?`, orders_expiry for
// `status = 'ready'`, accounts_profile_key_thumbprint_key for an account's
// profile — and such a plan reads every row sharing that value, a profile's
// every order on each read, more with every order stored. On SQLite, which
// prefers a unique key's equality by itself, the test is the plain
// comparison. TestStatementsByKeyReachTheirRowByKeyOnANewPostgresDatabase
// holds each such statement to its key.

// dialect is the seam between the statements this package writes once and
// the databases it runs on. Statements are written with ? placeholders and
// the SQL both SQLite and PostgreSQL accept (RETURNING, ON CONFLICT, partial
// indexes, plain joins — no JSON functions, no rowid); every statement that
// genuinely differs lives behind these methods, and so does the way writes
// reach the database (engine). Adding a database is adding a dialect: its
// migrations, these statements, and an engine.
type dialect interface {
	name() string
	// migrations is the dialect's ordered, append-only schema history.
	migrations() []migration
	// rebind turns ? placeholders into the dialect's own.
	rebind(stmt string) string
	// unavailable reports whether err says the database cannot take
	// writes for now (ErrUnavailable).
	unavailable(err error) bool
	// uniqueViolation reports whether err is a unique constraint's refusal.
	uniqueViolation(err error) bool
	// claimJobs is the statement that leases due jobs and owed abandons
	// (see ClaimJobsIn), returning cols of each, from the lanes whose
	// placeholders lanes lists ("?,?"). Its arguments, in order: owner,
	// lease until, now, kind, each lane, now, now, owner; then
	// abandonOwedWhere's (kind, each lane, now, owner); limit. The rows it
	// picks must be locked against a concurrent claimer: SQLite's single
	// writer does that by itself; PostgreSQL picks them FOR UPDATE SKIP
	// LOCKED.
	claimJobs(cols, lanes string) string
	// reclaimStuckOrders is the statement that takes over orders left
	// processing (see ReclaimStuckOrders) that the condition pick (one
	// placeholder) holds for, returning cols of each. Its arguments: now,
	// the new claimer, profile, pick's, the kind of job that keeps an
	// order from being stuck (twice), limit, pick's. Same locking rule as
	// claimJobs.
	reclaimStuckOrders(cols, pick string) string
	// lockForMigration is the first thing migrate does in its
	// transaction: it makes concurrent openers of one database migrate
	// one after the other, the first doing the work.
	lockForMigration(ctx context.Context, tx *sql.Tx) error
	// announceJob is the statement, run in the transaction that enqueues
	// a ready job, that tells other instances' runners (see WatchJobs);
	// its one argument is the job's kind. "" when the dialect has no
	// such signal.
	announceJob() string
	// serverClock is the statement reading the database server's clock
	// (one timestamp column), for ReadServerClock; "" when the database
	// has no server of its own (SQLite runs in this process).
	serverClock() string
	// rowLock is the clause a SELECT inside a write ends with to lock the
	// rows it reads until the transaction ends, for a write that decides
	// from them while other writes run at once (PostgreSQL's READ
	// COMMITTED writes; see postgresEngine); "" when writes run one at a
	// time (SQLite's single writer), and then a statement sent only to
	// lock rows is not sent at all.
	rowLock() string
	// shareLock is rowLock's shared form: the rows read cannot change
	// until the transaction ends, while other transactions may read them
	// so too; "" when writes run one at a time.
	shareLock() string
	// spendNonceAs is one statement that spends a nonce and reads an
	// account (see UseNonceAs), or "" to do both in a transaction of two
	// statements. Its arguments: the nonce's key, the account's profile
	// and id. Its one row: the account's columns as scanAccount reads
	// them (placeholder values when it does not exist), whether the
	// nonce was fresh, and whether the account exists.
	spendNonceAs() string
	// issueOrder is one statement that does IssueOrder's writes (the
	// order to valid, guarded on processing; the certificate; its audit
	// row; spends rate limit spends), or "" to run them as a transaction.
	// Its arguments: certificate id, now, order id; the certificate's id,
	// profile, account, serial, chain, public key, notBefore, notAfter,
	// now, issuer key id; the audit row's values (auditRow); each spend's
	// issueSpendArgs. Its one row: how many orders it moved (0 or 1), the
	// other writes done only when 1.
	issueOrder(spends int) string
	// insertsInWith reports whether one statement may insert into several
	// tables through data-modifying WITH clauses, its foreign keys checked
	// at the statement's end (PostgreSQL): a write of many rows is then
	// one round trip (see insertOrderAtOnce).
	insertsInWith() bool
	// crlLateRows is how a CRL built from the last one finds the ledger
	// rows below that one's seq that it did not see: mark, run in the
	// read's snapshot, returns what the next read is given back (the
	// snapshot); late, run in the next read's, tells whether any row of
	// the issuer with an id up to the seq is one the marked snapshot did
	// not see (arguments: issuer, mark, seq, mark). Both "" where ledger
	// rows commit in the order of their ids, so that a snapshot that sees
	// a row sees every row below it (SQLite: an id is taken inside the
	// write that commits it, and writes commit one at a time, across
	// processes too).
	crlLateRows() (mark, late string)
	// crlStaleRows is StaleCRLIssuers' test of a CA (cas.k) whose
	// stored CRL is c: true when a ledger row of the CA is not on it.
	// It must read only the rows written since c read the ledger, not
	// every row of the CA.
	crlStaleRows() string
}

// engine is how a dialect runs the store's writes. Reads go to the DB's
// read pool directly; every write, the store's own and migrations, goes
// through do.
//
// SQLite's engine is one writer connection behind a group commit (see
// groupCommit) with a statement cache below it. PostgreSQL's is a pool
// running each write in its own READ COMMITTED transaction, with
// synchronous_commit = off for a lazy one (see postgresEngine).
type engine interface {
	// do runs fn in a write transaction and returns once that transaction
	// is committed (nil) or fn's changes are undone (fn's error). fn may
	// run more than once, each run in a fresh transaction, when an engine
	// retries one that lost a race with another (PostgreSQL's deadlocks):
	// every variable it sets outside the
	// transaction, it sets afresh on each run. A lazy
	// write may be committed without waiting for it to be durable: it
	// becomes durable with the next durable write, never later (see
	// groupCommit for why that is what a used nonce needs).
	do(ctx context.Context, fn func(*sql.Tx) error, lazy bool) error
	// close finishes the writes already handed over and releases the
	// engine's connections.
	close() error
	// watchJobs calls wake with the kind of each job another instance
	// announces (see dialect.announceJob), and with "" whenever some may
	// have been missed, until ctx ends. An engine without the signal
	// returns at once.
	watchJobs(ctx context.Context, wake func(kind string))
}
