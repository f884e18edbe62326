package store

import (
	"context"
	"database/sql"
	"sync"
)

// A FirstRead names the row a signed request reads first — its order,
// authorization, challenge or certificate — before the request's nonce is
// spent, so that UseNonceAs reads it with the spend. Six of a
// certificate's seven signed requests read a row by its id right after
// their nonce. On PostgreSQL the read goes in the spend's pipeline: one
// round trip instead of two (each a wait on a backend and that backend's
// wake-up, on the cores the server shares). On SQLite it runs in the
// spend's write, on the writer's connection, whose page cache is warm:
// a reader connection's starts cold after every write, and its read is a
// transaction of its own.
//
// The row read is kept for the first GetOrder, GetAuthz, GetChallenge or
// GetCertificate of that id under the context, and only for it: a read
// after the request's own writes goes to the database again. It is the
// row as committed when the nonce was spent (on SQLite, with the writes
// that share the spend's commit), which the request would have read a
// moment later anyway, and it is handed over only after that commit. A
// read of another id, or of a request whose nonce was refused or whose
// account is missing, reads the database, as without it.
type FirstRead struct {
	kind firstKind
	id   string

	mu    sync.Mutex
	held  bool // read with the nonce, not yet taken
	order Order
	authz Authz
	chal  Challenge
	cert  Certificate
	err   error
}

type firstKind int

const (
	firstOrder firstKind = iota + 1
	firstAuthz
	firstChallenge
	firstCertificate
)

// FirstReadOfOrder names the order id as a request's first read.
func FirstReadOfOrder(id string) *FirstRead { return &FirstRead{kind: firstOrder, id: id} }

// FirstReadOfAuthz names the authorization id as a request's first read.
func FirstReadOfAuthz(id string) *FirstRead { return &FirstRead{kind: firstAuthz, id: id} }

// FirstReadOfChallenge names the challenge id as a request's first read.
func FirstReadOfChallenge(id string) *FirstRead { return &FirstRead{kind: firstChallenge, id: id} }

// FirstReadOfCertificate names the certificate id as a request's first
// read.
func FirstReadOfCertificate(id string) *FirstRead {
	return &FirstRead{kind: firstCertificate, id: id}
}

type firstReadKey struct{}

// WithFirstRead returns ctx naming fr as its request's first read, for
// UseNonceAs and the read that takes it.
func WithFirstRead(ctx context.Context, fr *FirstRead) context.Context {
	return context.WithValue(ctx, firstReadKey{}, fr)
}

// firstReadOf is ctx's FirstRead, or nil.
func firstReadOf(ctx context.Context) *FirstRead {
	fr, _ := ctx.Value(firstReadKey{}).(*FirstRead)
	return fr
}

// take hands the row read with the nonce to the read of kind and id, once:
// ok is false (and the caller reads the database) when ctx names no first
// read, another one, or one not read or already taken.
func (fr *FirstRead) take(kind firstKind, id string) (ok bool) {
	if fr == nil || fr.kind != kind || fr.id != id {
		return false
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	ok, fr.held = fr.held, false
	return ok
}

// query is the first read's statement and arguments, as its Get method
// sends it.
func (fr *FirstRead) query(db *DB, profile string) (string, []any) {
	switch fr.kind {
	case firstOrder:
		return db.q(getOrderQuery), []any{profile, fr.id}
	case firstAuthz:
		return db.q(db.getAuthzQuery()), []any{fr.id, profile}
	case firstChallenge:
		return db.q(getChallengeQuery), []any{fr.id, profile}
	default:
		return db.q(getCertificateQuery), []any{profile, fr.id}
	}
}

// scan reads the first read's rows as its Get method does, keeping the
// row or the read's error (ErrNotFound for none) for take. skip is the
// destinations that drop a column of the rows' driver.
func (fr *FirstRead) scan(rows rowsScanner, skip func(n int) []any) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	switch fr.kind {
	case firstOrder:
		fr.order, fr.err = scanOrderRows(rows, fr.id, skip)
	case firstAuthz:
		fr.authz, fr.err = scanAuthzRows(rows, fr.id)
	case firstChallenge:
		fr.chal, fr.authz, fr.err = scanChallengeRow(oneRow{rows}, fr.id)
	default:
		fr.cert, fr.err = scanCertificateRow(oneRow{rows}, fr.id)
	}
	fr.held = true
}

// drop forgets a row read with a nonce that was then refused.
func (fr *FirstRead) drop() {
	if fr == nil {
		return
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fr.held = false
}

// rowsScanner is what a read of several rows iterates: *sql.Rows, or
// pgx.Rows in a pipeline.
type rowsScanner interface {
	rowScanner
	Next() bool
	Err() error
}

// oneRow scans the first of rows as a single-row read, sql.ErrNoRows when
// there is none (as *sql.Row does).
type oneRow struct{ rows rowsScanner }

func (o oneRow) Scan(dest ...any) error {
	if !o.rows.Next() {
		if err := o.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return o.rows.Scan(dest...)
}
