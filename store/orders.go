package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// Order is an ACME order (RFC 8555 §7.1.3).
type Order struct {
	ID            string
	Profile       string
	AccountID     string
	Status        acme.Status // pending, ready, processing, valid, invalid
	Identifiers   []acme.Identifier
	NotBefore     time.Time // zero: not requested
	NotAfter      time.Time
	Expires       time.Time
	Error         []byte // problem document JSON; nil when none
	CSR           []byte // DER, once finalized
	CertificateID string
	AuthzIDs      []string // filled by GetOrder
	CreatedAt     time.Time
	// UpdatedAt is when the order last changed: for a processing order,
	// when it was claimed for issuance or last resumed (see
	// ReclaimStuckOrders).
	UpdatedAt time.Time
	// Client is the client that finalized the order, recorded by
	// ClaimOrderForIssue; zero before.
	Client OrderClient
	// CertificateProfile is the certificate profile the order chose at
	// new-order (draft-ietf-acme-profiles); "" for none.
	CertificateProfile string
	// Replaces is newOrder's "replaces" (RFC 9773 §5), the certID of the
	// certificate the order replaces as the client sent it; "" for none.
	Replaces string
	// ReplacesCertificateID is the id of that certificate. CreateOrder
	// refuses, with ErrConflict, a second order replacing one certificate
	// while an earlier one is not invalid.
	ReplacesCertificateID string
	// ClaimedBy is the process incarnation that claimed the order for
	// issuance or last resumed it (ClaimOrderForIssue, ReclaimStuckOrders);
	// "" for none recorded.
	ClaimedBy string
}

// OrderClient describes the client that finalized an order: its address
// and user agent, each stored clipped to AuditFieldMax (they end up in the
// order's audit rows).
type OrderClient struct {
	Addr      string
	UserAgent string
}

// Authz is an ACME authorization (RFC 8555 §7.1.4) with its challenges.
type Authz struct {
	ID         string
	OrderID    string
	AccountID  string
	Identifier acme.Identifier
	Wildcard   bool
	Status     acme.Status // pending, valid, invalid, deactivated, expired, revoked
	Expires    time.Time
	Challenges []Challenge
}

// Challenge is an ACME challenge (RFC 8555 §7.1.5).
type Challenge struct {
	ID        string
	AuthzID   string
	Type      string
	Token     string
	Status    acme.Status // pending, processing, valid, invalid
	Validated time.Time
	Error     []byte // problem document JSON; nil when none
}

// orderScanCols are the columns scanOrder reads, in its order.
var orderScanCols = []string{"id", "profile", "account_id", "status", "identifiers", "not_before", "not_after", "expires_at",
	"error", "csr", "certificate_id", "created_at", "client_addr", "user_agent", "certificate_profile", "replaces", "replaces_certificate_id", "updated_at", "claimed_by"}

var orderCols = strings.Join(orderScanCols, ", ")

// orderColsOf is orderCols qualified by table (or alias) t, for joins.
func orderColsOf(t string) string { return t + "." + strings.Join(orderScanCols, ", "+t+".") }

func scanOrder(r rowScanner) (Order, error) {
	var (
		o                Order
		idents           string
		nb, na           sql.NullInt64
		expires, created int64
		updated          int64
		problem, certID  sql.NullString
		replacesCert     sql.NullString
		claimedBy        sql.NullString
		csr              []byte
	)
	if err := r.Scan(&o.ID, &o.Profile, &o.AccountID, &o.Status, &idents, &nb, &na, &expires, &problem, &csr, &certID, &created,
		&o.Client.Addr, &o.Client.UserAgent, &o.CertificateProfile, &o.Replaces, &replacesCert, &updated, &claimedBy); err != nil {
		return Order{}, err
	}
	o.ReplacesCertificateID, o.ClaimedBy = replacesCert.String, claimedBy.String
	if err := json.Unmarshal([]byte(idents), &o.Identifiers); err != nil {
		return Order{}, fmt.Errorf("order %s identifiers: %w", o.ID, err)
	}
	o.NotBefore, o.NotAfter, o.Expires, o.CreatedAt, o.UpdatedAt = nullMs(nb), nullMs(na), ms(expires), ms(created), ms(updated)
	if problem.Valid {
		o.Error = []byte(problem.String)
	}
	o.CSR, o.CertificateID = csr, certID.String
	return o, nil
}

const authzCols = `a.id, a.order_id, a.account_id, a.identifier_type, a.identifier_value, a.wildcard, a.status, a.expires_at`

const challengeCols = `c.id, c.authz_id, c.type, c.token, c.status, c.validated_at, c.error`

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// CreateOrder stores an order with its authorizations and their
// challenges in one transaction, giving each an id. Challenge tokens must
// be set by the caller.
//
// spends, when given, are spent from their rate limit buckets in the same
// write (see SpendLimits): when one does not fit, nothing is written and
// the error is a *LimitError; when the order cannot be stored, nothing is
// spent. An account that is not valid (deactivated since its request was
// verified) stores no order: ErrWrongState.
//
// At READ COMMITTED: its rows are new (fresh ids); the rate limit buckets
// move in an upsert on their newest rows, or after locking them (see
// readSpentTATs); the pending authorizations bound is counted with its row
// locked (see pendingCount), and an order without the cap locks that row
// all the same (see forgetPendingBound), which also makes a replacement's
// check for an earlier one safe (see checkNotReplaced).
func (db *DB) CreateOrder(ctx context.Context, o Order, authzs []Authz, now time.Time, spends ...LimitSpend) (Order, error) {
	idents, err := json.Marshal(o.Identifiers)
	if err != nil {
		return Order{}, fmt.Errorf("store: order identifiers: %w", err)
	}
	o.ID, o.Status, o.CreatedAt = NewID(), acme.StatusPending, now
	o.AuthzIDs = make([]string, len(authzs))
	if err := checkSpends(spends); err != nil {
		return Order{}, err
	}
	capAt, err := pendingCapOf(o, spends)
	if err != nil {
		return Order{}, err
	}
	if e, ok := db.eng.(*postgresEngine); ok {
		switch done, err := db.createOrderAtOnce(ctx, e, &o, string(idents), authzs, spends, capAt, now); {
		case err != nil:
			return Order{}, fmt.Errorf("store: creating order: %w", err)
		case done:
			return o, nil
		}
	}
	err = db.withTx(ctx, func(tx *sql.Tx) error {
		if err := db.checkAccountValid(ctx, tx, o.AccountID); err != nil {
			return err
		}
		if capAt < 0 {
			if err := db.forgetPendingBound(ctx, tx, o); err != nil {
				return err
			}
		}
		out, ok, err := db.spendOrderTx(ctx, tx, spends, now, &orderCap{o: o, authzs: authzs})
		if err != nil {
			return err
		}
		// Over the pending authorizations cap the order is refused for
		// that, before its replaced certificate is looked at; otherwise
		// a certificate replaced already is refused before the limits.
		if o.ReplacesCertificateID != "" && (capAt < 0 || out[capAt].Allowed) {
			if err := db.checkNotReplaced(ctx, tx, o.ReplacesCertificateID, now); err != nil {
				return err
			}
		}
		if !ok {
			return &LimitError{Decisions: out}
		}
		if db.dialect.insertsInWith() {
			if done, err := db.insertOrderAtOnce(ctx, tx, &o, string(idents), authzs, now); done || err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO orders
			(id, profile, account_id, status, identifiers, not_before, not_after, expires_at, created_at, updated_at, certificate_profile,
			 replaces, replaces_certificate_id)
			VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			o.ID, o.Profile, o.AccountID, string(idents), msOrNull(o.NotBefore), msOrNull(o.NotAfter),
			o.Expires.UnixMilli(), now.UnixMilli(), now.UnixMilli(), o.CertificateProfile,
			o.Replaces, strOrNull(o.ReplacesCertificateID)); err != nil {
			return err
		}
		for i, id := range o.Identifiers {
			if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO order_identifiers (order_id, position, type, value) VALUES (?, ?, ?, ?)`),
				o.ID, i, id.Type, id.Value); err != nil {
				return err
			}
		}
		for i, a := range authzs {
			a.ID = NewID()
			o.AuthzIDs[i] = a.ID
			wildcard := 0
			if a.Wildcard {
				wildcard = 1
			}
			if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO authorizations
				(id, order_id, position, account_id, identifier_type, identifier_value, wildcard, status, expires_at, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)`),
				a.ID, o.ID, i, o.AccountID, a.Identifier.Type, a.Identifier.Value, wildcard, a.Expires.UnixMilli(),
				now.UnixMilli(), now.UnixMilli()); err != nil {
				return err
			}
			if len(a.Challenges) == 0 {
				continue
			}
			// An authorization's challenges in one statement: one run
			// instead of one per challenge type offered.
			args := make([]any, 0, 6*len(a.Challenges))
			for j, c := range a.Challenges {
				args = append(args, NewID(), a.ID, j, c.Type, c.Token, now.UnixMilli())
			}
			if _, err := tx.ExecContext(ctx, db.q(insertChallenges(len(a.Challenges))), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrWrongState) {
		return Order{}, err
	}
	if err != nil {
		return Order{}, fmt.Errorf("store: creating order: %w", err)
	}
	return o, nil
}

// accountValidForOrder reads an account that is valid, locking it (where
// writes run at once) until the transaction ends: an order stored in the
// same transaction is then either seen by the account's deactivation,
// which invalidates it, or refused, the deactivation having come first.
// The account by its key alone (see "Rows read by their key" in
// dialect.go).
const accountValidForOrder = `SELECT 1 FROM accounts WHERE id = ? AND status = 'valid'`

// checkAccountValid is ErrWrongState unless the account is valid, read
// as accountValidForOrder reads it.
func (db *DB) checkAccountValid(ctx context.Context, tx *sql.Tx, accountID string) error {
	var one int
	err := tx.QueryRowContext(ctx, db.q(accountValidForOrder+db.dialect.shareLock()), accountID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: account %s is not valid", ErrWrongState, accountID)
	}
	return err
}

// insertOrderAtOnce is CreateOrder's inserts — the order, its
// identifiers, authorizations and challenges — as one statement of
// data-modifying WITH clauses (see dialect.insertsInWith): one round trip
// instead of one per row. The foreign keys between them are checked at the
// statement's end, every row inserted. It sets o.AuthzIDs. done is false,
// nothing sent, for an order whose rows take more placeholders than a
// statement holds; the caller then inserts them one by one.
func (db *DB) insertOrderAtOnce(ctx context.Context, tx *sql.Tx, o *Order, idents string, authzs []Authz, now time.Time) (done bool, err error) {
	var b strings.Builder
	args, ok := orderInserts(&b, o, idents, authzs, now, 0)
	if !ok {
		return false, nil
	}
	b.WriteString(` SELECT 1`)
	_, err = tx.ExecContext(ctx, db.q(b.String()), args...)
	return true, err
}

// orderInserts writes into b insertOrderAtOnce's WITH clauses, the
// statement's main SELECT left to the caller, and returns their arguments
// (with room for extra more), setting o.AuthzIDs. ok is false, nothing
// written, when the rows and extra take more placeholders than a statement
// holds.
func orderInserts(b *strings.Builder, o *Order, idents string, authzs []Authz, now time.Time, extra int) (args []any, ok bool) {
	n := 13 + 4*len(o.Identifiers) + 10*len(authzs)
	for _, a := range authzs {
		n += 6 * len(a.Challenges)
	}
	if n+extra > 65535 {
		return nil, false
	}
	args = make([]any, 0, n+extra)
	b.WriteString(`WITH o AS (INSERT INTO orders
		(id, profile, account_id, status, identifiers, not_before, not_after, expires_at, created_at, updated_at, certificate_profile,
		 replaces, replaces_certificate_id)
		VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?))`)
	args = append(args, o.ID, o.Profile, o.AccountID, idents, msOrNull(o.NotBefore), msOrNull(o.NotAfter),
		o.Expires.UnixMilli(), now.UnixMilli(), now.UnixMilli(), o.CertificateProfile, o.Replaces, strOrNull(o.ReplacesCertificateID))
	rows := func(i int, head, row string) {
		if i == 0 {
			b.WriteString(head)
		} else {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	for i, id := range o.Identifiers {
		rows(i, `, i AS (INSERT INTO order_identifiers (order_id, position, type, value) VALUES `, `(?, ?, ?, ?)`)
		args = append(args, o.ID, i, id.Type, id.Value)
	}
	if len(o.Identifiers) > 0 {
		b.WriteString(`)`)
	}
	type challengeRow struct {
		authz string
		j     int
		c     Challenge
	}
	var challenges []challengeRow
	for i, a := range authzs {
		a.ID = NewID()
		o.AuthzIDs[i] = a.ID
		wildcard := 0
		if a.Wildcard {
			wildcard = 1
		}
		rows(i, `, a AS (INSERT INTO authorizations
			(id, order_id, position, account_id, identifier_type, identifier_value, wildcard, status, expires_at, created_at, updated_at)
			VALUES `, `(?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)`)
		args = append(args, a.ID, o.ID, i, o.AccountID, a.Identifier.Type, a.Identifier.Value, wildcard, a.Expires.UnixMilli(),
			now.UnixMilli(), now.UnixMilli())
		for j, c := range a.Challenges {
			challenges = append(challenges, challengeRow{a.ID, j, c})
		}
	}
	if len(authzs) > 0 {
		b.WriteString(`)`)
	}
	for k, c := range challenges {
		rows(k, `, c AS (INSERT INTO challenges (id, authz_id, position, type, token, status, updated_at) VALUES `,
			`(?, ?, ?, ?, ?, 'pending', ?)`)
		args = append(args, NewID(), c.authz, c.j, c.c.Type, c.c.Token, now.UnixMilli())
	}
	if len(challenges) > 0 {
		b.WriteString(`)`)
	}
	return args, true
}

// insertChallenges is the statement inserting n pending challenges, six
// arguments each: id, authz_id, position, type, token, updated_at.
func insertChallenges(n int) string {
	return `INSERT INTO challenges (id, authz_id, position, type, token, status, updated_at) VALUES ` +
		strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, 'pending', ?), `, n), ", ")
}

// checkNotReplaced refuses, with ErrConflict, to let another order replace
// certificate certID while an order replacing it is still live: not
// invalid, and not a pending or ready order past its expiry (which is
// invalid, whether or not a sweep has rewritten its row yet). The check
// and the insert after it are one transaction, so two concurrent
// replacements of one certificate store one: on SQLite the writer is
// alone; on PostgreSQL (READ COMMITTED) the replacing orders are of the
// certificate's account (the authority refuses any other), and every
// order of an account has locked the row of its pending authorizations
// bound before this check (the cap's upsert, pendingCount, or
// forgetPendingBound), so the second to take that lock sees the first's
// order.
func (db *DB) checkNotReplaced(ctx context.Context, tx *sql.Tx, certID string, now time.Time) error {
	var by string
	err := tx.QueryRowContext(ctx, db.q(`SELECT id `+liveReplacementOf), certID, now.UnixMilli()).Scan(&by)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: certificate %s is already replaced by order %s", ErrConflict, certID, by)
}

// liveReplacementOf finds the live order replacing a certificate (its id,
// then now): one that is not a deadReplacement.
const liveReplacementOf = `FROM orders WHERE replaces_certificate_id = ?
	AND NOT ` + deadReplacement + ` LIMIT 1`

// deadReplacement is the condition (of now) of an order that replaces no
// certificate any more: invalid, or pending or ready past its expiry
// (which is invalid, whether or not a sweep has rewritten its row yet).
const deadReplacement = `(status = 'invalid' OR (status IN ('pending','ready') AND expires_at <= ?))`

// ReplacementOf reports whether a live order replaces certificate certID
// (live as checkNotReplaced counts it), whether that order is finalized
// (processing or valid), and whether any order stored replaced it before,
// live or not (earlier: an invalid or expired replacement, until the
// retention sweep deletes it). checkNotReplaced lets at most one be live.
// One read of the certificate's replacements, few, by orders_replaces.
func (db *DB) ReplacementOf(ctx context.Context, certID string, now time.Time) (live, finalized, earlier bool, err error) {
	var state sql.NullInt64
	err = db.r.QueryRowContext(ctx, db.q(`SELECT MAX(CASE
			WHEN `+deadReplacement+` THEN 0
			WHEN status IN ('processing','valid') THEN 2 ELSE 1 END)
		FROM orders WHERE replaces_certificate_id = ?`), now.UnixMilli(), certID).Scan(&state)
	if err != nil {
		return false, false, false, fmt.Errorf("store: the replacement of certificate %s: %w", certID, err)
	}
	if !state.Valid {
		return false, false, false, nil // none, ever
	}
	return state.Int64 > 0, state.Int64 == 2, true, nil
}

// GetOrder reads an order of a profile, with its authorization ids.
func (db *DB) GetOrder(ctx context.Context, profile, id string) (Order, error) {
	if !holdable(id) {
		return Order{}, fmt.Errorf("%w: order %q", ErrNotFound, id)
	}
	if fr := firstReadOf(ctx); fr.take(firstOrder, id) {
		return fr.order, fr.err
	}
	rows, err := db.r.QueryContext(ctx, db.q(getOrderQuery), profile, id)
	if err != nil {
		return Order{}, fmt.Errorf("store: order %s: %w", id, err)
	}
	defer rows.Close()
	return scanOrderRows(rows, id, discard)
}

// getOrderQuery is one statement, so that the order and its
// authorization list are one snapshot, and one read instead of two: a row
// per authorization (one with a NULL id for an order without any), in
// creation order. The order by its key alone (see "Rows read by their
// key" in dialect.go).
var getOrderQuery = `SELECT ` + orderColsOf("orders") + `, a.id
		FROM orders LEFT JOIN authorizations a ON a.order_id = orders.id
		WHERE (orders.profile = ?) IS TRUE AND orders.id = ? ORDER BY a.position`

// scanOrderRows reads getOrderQuery's rows; skip drops a column of the
// rows after the first.
func scanOrderRows(rows rowsScanner, id string, skip func(n int) []any) (Order, error) {
	var (
		o     Order
		found bool
		err   error
	)
	for rows.Next() {
		var authzID sql.NullString
		if !found {
			if o, err = scanOrder(appendDest{rows, []any{&authzID}}); err != nil {
				return Order{}, fmt.Errorf("store: order %s: %w", id, err)
			}
			found = true
		} else if err := rows.Scan(append(skip(len(orderScanCols)), &authzID)...); err != nil {
			return Order{}, fmt.Errorf("store: order %s: %w", id, err)
		}
		if authzID.Valid {
			o.AuthzIDs = append(o.AuthzIDs, authzID.String)
		}
	}
	if err := rows.Err(); err != nil {
		return Order{}, fmt.Errorf("store: order %s: %w", id, err)
	}
	if !found {
		return Order{}, readErr(sql.ErrNoRows, "order "+id)
	}
	return o, nil
}

// discard is n scan destinations that drop their column.
func discard(n int) []any {
	d := make([]any, n)
	for i := range d {
		d[i] = new(sql.RawBytes)
	}
	return d
}

// appendDest is a row whose Scan fills more destinations after the ones
// its caller passes: a scan function's columns, then a query's own extras.
type appendDest struct {
	r     rowScanner
	extra []any
}

func (a appendDest) Scan(dest ...any) error { return a.r.Scan(append(dest, a.extra...)...) }

// GetAuthz reads an authorization of a profile with its challenges, in one
// statement (one snapshot).
func (db *DB) GetAuthz(ctx context.Context, profile, id string) (Authz, error) {
	if !holdable(id) {
		return Authz{}, fmt.Errorf("%w: authorization %q", ErrNotFound, id)
	}
	if fr := firstReadOf(ctx); fr.take(firstAuthz, id) {
		return fr.authz, fr.err
	}
	rows, err := db.r.QueryContext(ctx, db.q(db.getAuthzQuery()), id, profile)
	if err != nil {
		return Authz{}, fmt.Errorf("store: authorization %s: %w", id, err)
	}
	defer rows.Close()
	return scanAuthzRows(rows, id)
}

// getAuthzQuery is GetAuthz's statement: a row per challenge, in their
// order.
func (db *DB) getAuthzQuery() string {
	if _, ok := db.dialect.(postgresDialect); ok {
		return pgGetAuthz
	}
	return `SELECT ` + authzCols + `, ` + challengeCols + ` FROM authorizations a
		JOIN orders o ON o.id = a.order_id
		LEFT JOIN challenges c ON c.authz_id = a.id
		WHERE a.id = ? AND o.profile = ? ORDER BY c.position`
}

// scanAuthzRows reads getAuthzQuery's rows.
func scanAuthzRows(rows rowsScanner, id string) (Authz, error) {
	var (
		a     Authz
		found bool
	)
	for rows.Next() {
		var (
			row              Authz
			wildcard         int
			expires          int64
			cid, caid, ctype sql.NullString
			token, cstatus   sql.NullString
			validated        sql.NullInt64
			problem          sql.NullString
		)
		if err := rows.Scan(&row.ID, &row.OrderID, &row.AccountID, &row.Identifier.Type, &row.Identifier.Value, &wildcard, &row.Status, &expires,
			&cid, &caid, &ctype, &token, &cstatus, &validated, &problem); err != nil {
			return Authz{}, fmt.Errorf("store: authorization %s: %w", id, err)
		}
		if !found {
			a, found = row, true
			a.Wildcard, a.Expires = wildcard != 0, ms(expires)
		}
		if !cid.Valid {
			continue // an authorization without challenges
		}
		c := Challenge{ID: cid.String, AuthzID: caid.String, Type: ctype.String, Token: token.String, Status: acme.Status(cstatus.String), Validated: nullMs(validated)}
		if problem.Valid {
			c.Error = []byte(problem.String)
		}
		a.Challenges = append(a.Challenges, c)
	}
	if err := rows.Err(); err != nil {
		return Authz{}, fmt.Errorf("store: authorization %s: %w", id, err)
	}
	if !found {
		return Authz{}, readErr(sql.ErrNoRows, "authorization "+id)
	}
	return a, nil
}

// GetChallenge reads a challenge of a profile with its authorization
// (without the authorization's other challenges).
func (db *DB) GetChallenge(ctx context.Context, profile, id string) (Challenge, Authz, error) {
	if !holdable(id) {
		return Challenge{}, Authz{}, fmt.Errorf("%w: challenge %q", ErrNotFound, id)
	}
	if fr := firstReadOf(ctx); fr.take(firstChallenge, id) {
		return fr.chal, fr.authz, fr.err
	}
	return scanChallengeRow(db.r.QueryRowContext(ctx, db.q(getChallengeQuery), id, profile), id)
}

const getChallengeQuery = `SELECT ` + challengeCols + `, ` + authzCols + ` FROM challenges c
		JOIN authorizations a ON a.id = c.authz_id JOIN orders o ON o.id = a.order_id
		WHERE c.id = ? AND (o.profile = ?) IS TRUE` // the order by its key (see dialect.go)

// scanChallengeRow reads getChallengeQuery's row.
func scanChallengeRow(row rowScanner, id string) (Challenge, Authz, error) {
	var (
		c         Challenge
		a         Authz
		validated sql.NullInt64
		problem   sql.NullString
		wildcard  int
		expires   int64
	)
	err := row.Scan(&c.ID, &c.AuthzID, &c.Type, &c.Token, &c.Status, &validated, &problem,
		&a.ID, &a.OrderID, &a.AccountID, &a.Identifier.Type, &a.Identifier.Value, &wildcard, &a.Status, &expires)
	if err := readErr(err, "challenge "+id); err != nil {
		return Challenge{}, Authz{}, err
	}
	c.Validated = nullMs(validated)
	if problem.Valid {
		c.Error = []byte(problem.String)
	}
	a.Wildcard, a.Expires = wildcard != 0, ms(expires)
	return c, a, nil
}

// StartChallenge moves a pending challenge of a pending authorization to
// processing. It reports false (and no error) when the challenge had
// already left pending: a repeated POST is answered with its state.
//
// One guarded statement. Its check of the authorization is the
// authorization as committed when it runs: one deactivated at that moment
// leaves the challenge processing, and its result then changes nothing
// (CompleteChallenge's update of the authorization is guarded).
func (db *DB) StartChallenge(ctx context.Context, id string, now time.Time) (bool, error) {
	res, err := db.wr.ExecContext(ctx, db.q(`UPDATE challenges SET status = 'processing', updated_at = ?
		WHERE id = ? AND status = 'pending'
		AND EXISTS (SELECT 1 FROM authorizations a WHERE a.id = challenges.authz_id AND a.status = 'pending' AND a.expires_at > ?)`),
		now.UnixMilli(), id, now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("store: starting challenge %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// NoteChallengeRetry records problem as the error of a challenge whose
// validation attempt failed and is to be tried again (RFC 8555 §8.2: the
// challenge stays processing, and its error says that an attempt
// failed). A challenge settled meanwhile is left as it is; the error of
// one that then becomes valid is cleared by CompleteChallenge.
func (db *DB) NoteChallengeRetry(ctx context.Context, id string, problem []byte, now time.Time) error {
	if _, err := db.wr.ExecContext(ctx, db.q(`UPDATE challenges SET error = ?, updated_at = ?
		WHERE id = ? AND status IN ('pending','processing')`), nullBytes(problem), now.UnixMilli(), id); err != nil {
		return fmt.Errorf("store: noting a retry of challenge %s: %w", id, err)
	}
	return nil
}

// ChallengeResult is what CompleteChallenge changed.
type ChallengeResult struct {
	OrderID     string
	OrderStatus acme.Status // the order's status after the change
	// OrderChanged: this call moved the order (to ready or invalid).
	OrderChanged bool
}

// CompleteChallenge records a validation's result in one transaction:
// the challenge (processing → valid/invalid), its authorization (pending →
// valid/invalid), and the order (pending → ready once every authorization
// is valid; pending → invalid on failure). Each step is a guarded write,
// so concurrent validations of an order's last authorizations promote it
// once; and on PostgreSQL (READ COMMITTED, see postgresEngine) the order's
// row is locked before the promotion reads its authorizations, so that of
// two validations settling an order's last two authorizations at once the
// second to take the lock sees the first's authorization valid (without
// the lock, each would see the other's still pending, and the order would
// stay pending with every authorization valid). The locks are taken
// challenge, authorization, order, as DeactivateAuthz takes its own. A
// challenge still pending is settled directly: its validation ran
// before anything marked it processing (a challenge POST starts the
// validation first). ErrWrongState if the challenge is already settled. jobs (the
// notifications the result owes) are stored in the same transaction, when
// the challenge is settled by this call.
func (db *DB) CompleteChallenge(ctx context.Context, id string, valid bool, problem []byte, now time.Time, jobs ...NewJob) (ChallengeResult, error) {
	if e, ok := db.eng.(*postgresEngine); ok && valid && len(jobs) == 0 {
		return db.completeValidChallenge(ctx, e, id, problem, now) // the same writes in one round trip
	}
	return db.completeChallenge(ctx, id, valid, problem, now, nil, jobs)
}

// FailChallengeAudited is CompleteChallenge for a failed validation that
// also writes ev (its challenge_failed row, at ev.At), with the
// notifications in ev.Jobs, in the same transaction: a challenge that
// this call settles has its row, and one settled already (ErrWrongState)
// gets none.
func (db *DB) FailChallengeAudited(ctx context.Context, id string, problem []byte, ev AuditEvent) (ChallengeResult, error) {
	return db.completeChallenge(ctx, id, false, problem, ev.At, &ev, nil)
}

func (db *DB) completeChallenge(ctx context.Context, id string, valid bool, problem []byte, now time.Time, ev *AuditEvent, jobs []NewJob) (ChallengeResult, error) {
	status, validated := acme.StatusInvalid, time.Time{}
	if valid {
		status, validated = acme.StatusValid, now
	}
	var res ChallengeResult
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		res = ChallengeResult{} // fn may run again (see engine)
		var authzID string
		err := tx.QueryRowContext(ctx, db.q(`UPDATE challenges SET status = ?, validated_at = ?, error = ?, updated_at = ?
			WHERE id = ? AND status IN ('pending','processing') RETURNING authz_id`),
			status, msOrNull(validated), nullBytes(problem), now.UnixMilli(), id).Scan(&authzID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: challenge %s is not processing", ErrWrongState, id)
		}
		if err != nil {
			return err
		}
		if err := db.enqueueAll(ctx, tx, jobs, now); err != nil {
			return err
		}
		if ev != nil {
			if err := db.insertAudit(ctx, tx, *ev); err != nil {
				return err
			}
		}
		err = tx.QueryRowContext(ctx, db.q(`UPDATE authorizations SET status = ?, updated_at = ?
			WHERE id = ? AND status = 'pending' RETURNING order_id`), status, now.UnixMilli(), authzID).Scan(&res.OrderID)
		if errors.Is(err, sql.ErrNoRows) {
			// The authorization was settled meanwhile (another challenge,
			// deactivation, expiry): nothing further changes.
			return nil
		}
		if err != nil {
			return err
		}
		// The order's move answers with its new status; only an order
		// that did not move (another authorization still pending) is read,
		// and on PostgreSQL not even that: its row is locked first, and the
		// lock's read is its status unless the move changes it (no one
		// else changes the row meanwhile).
		var (
			moved  *sql.Row
			locked bool // res.OrderStatus read with the order's row locked
		)
		if valid {
			if lock := db.dialect.rowLock(); lock != "" {
				if err := tx.QueryRowContext(ctx, db.q(`SELECT status FROM orders WHERE id = ?`+lock), res.OrderID).Scan(&res.OrderStatus); err != nil {
					return err
				}
				locked = true
			}
			moved = tx.QueryRowContext(ctx, db.q(`UPDATE orders SET status = 'ready', updated_at = ?
				WHERE id = ? AND status = 'pending'
				AND NOT EXISTS (SELECT 1 FROM authorizations WHERE order_id = ? AND status <> 'valid')
				RETURNING status`),
				now.UnixMilli(), res.OrderID, res.OrderID)
		} else {
			moved = tx.QueryRowContext(ctx, db.q(`UPDATE orders SET status = 'invalid', error = ?, updated_at = ?
				WHERE id = ? AND status = 'pending' RETURNING status`), nullBytes(problem), now.UnixMilli(), res.OrderID)
		}
		switch err := moved.Scan(&res.OrderStatus); {
		case err == nil:
			res.OrderChanged = true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if locked {
			return nil
		}
		return tx.QueryRowContext(ctx, db.q(`SELECT status FROM orders WHERE id = ?`), res.OrderID).Scan(&res.OrderStatus)
	})
	if err != nil && !errors.Is(err, ErrWrongState) {
		err = fmt.Errorf("store: completing challenge %s: %w", id, err)
	}
	return res, err
}

// ProcessingChallenge names a challenge a validation is owed to.
type ProcessingChallenge struct {
	ID      string
	Profile string
	// AuthzExpires is its authorization's expiry, past which validating
	// it is moot.
	AuthzExpires time.Time
}

// ProcessingChallenges lists challenges in processing, for re-queueing
// validations at start.
func (db *DB) ProcessingChallenges(ctx context.Context) ([]ProcessingChallenge, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT c.id, o.profile, a.expires_at FROM challenges c
		JOIN authorizations a ON a.id = c.authz_id JOIN orders o ON o.id = a.order_id
		WHERE c.status = 'processing'`)
	if err != nil {
		return nil, fmt.Errorf("store: processing challenges: %w", err)
	}
	defer rows.Close()
	var out []ProcessingChallenge
	for rows.Next() {
		var (
			p       ProcessingChallenge
			expires int64
		)
		if err := rows.Scan(&p.ID, &p.Profile, &expires); err != nil {
			return nil, fmt.Errorf("store: processing challenges: %w", err)
		}
		p.AuthzExpires = ms(expires)
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeactivateAuthz moves a pending or valid authorization not yet expired
// at now to deactivated (RFC 8555 §7.5.2: expired is final, §7.1.6) and a
// pending or ready order that needed it to invalid.
// Both are guarded writes, which need no lock at READ COMMITTED: the
// order's guard is re-checked on its newest row, so a concurrent promotion
// to ready (CompleteChallenge) is either seen and undone, or finds the
// order invalid.
func (db *DB) DeactivateAuthz(ctx context.Context, id string, now time.Time) error {
	return db.withTx(ctx, func(tx *sql.Tx) error {
		var orderID string
		err := tx.QueryRowContext(ctx, db.q(`UPDATE authorizations SET status = 'deactivated', updated_at = ?
			WHERE id = ? AND status IN ('pending','valid') AND expires_at > ? RETURNING order_id`), now.UnixMilli(), id, now.UnixMilli()).Scan(&orderID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: authorization %s is neither pending nor valid, or has expired", ErrWrongState, id)
		}
		if err != nil {
			return fmt.Errorf("store: deactivating authorization %s: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE orders SET status = 'invalid', updated_at = ?
			WHERE id = ? AND status IN ('pending','ready')`), now.UnixMilli(), orderID); err != nil {
			return fmt.Errorf("store: invalidating order %s: %w", orderID, err)
		}
		return nil
	})
}

// ClaimOrderForIssue moves an unexpired ready order to processing and
// records its CSR, the client finalizing it (clipped to AuditFieldMax)
// and claimer, the process incarnation that claims it ("" for none; see
// ReclaimOrdersClaimedBy). Only one caller wins; the others get false.
//
// One guarded statement: PostgreSQL re-checks status on the order's newest
// row, so one claimer wins. The guard reaches the order by its key alone
// (see "Rows read by their key" in dialect.go).
func (db *DB) ClaimOrderForIssue(ctx context.Context, id string, csr []byte, client OrderClient, claimer string, now time.Time) (bool, error) {
	res, err := db.lazyWr.ExecContext(ctx, db.q(claimOrderForIssue), csr, Clip(text(client.Addr), AuditFieldMax), Clip(text(client.UserAgent), AuditFieldMax),
		strOrNull(claimer), now.UnixMilli(), id, now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("store: claiming order %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

const claimOrderForIssue = `UPDATE orders SET status = 'processing', csr = ?, client_addr = ?, user_agent = ?, claimed_by = ?, updated_at = ?
		WHERE id = ? AND (status = 'ready' AND expires_at > ?) IS TRUE`

// Certificate is an issued certificate.
type Certificate struct {
	ID        string
	OrderID   string
	Profile   string
	AccountID string
	Serial    string // lower-case hex
	ChainPEM  string
	PublicKey []byte // the leaf's SubjectPublicKeyInfo, stored at issuance
	NotBefore time.Time
	NotAfter  time.Time
	RevokedAt time.Time
	Reason    *int
	// IssuerKeyID names the CA that signed it, as signer.LeafIssuerKeyID
	// does; "" for certificates stored before it was recorded.
	IssuerKeyID string
	// RenewEarlyAt, when set, is when an operator asked for the
	// certificate to be renewed early (RFC 9773): its renewal window
	// moves there. ExplanationURL is the page the operator gave for why.
	RenewEarlyAt   time.Time
	ExplanationURL string
	// AlternatesPEM are the other chains its signer offered for the same
	// leaf (RFC 8555 §7.4.2), each PEM, leaf first; a client picks one by
	// its root (certbot's --preferred-chain, Caddy's preferred_chains).
	AlternatesPEM []string
}

// FailOrder moves an unfinished order to invalid with the problem document
// the client sees and the detail only an operator reads; ErrWrongState
// when it is finished already (nothing is written).
//
// One guarded statement.
func (db *DB) FailOrder(ctx context.Context, id string, problem []byte, detail string, now time.Time) error {
	res, err := db.wr.ExecContext(ctx, db.q(`UPDATE orders SET status = 'invalid', error = ?, failure_detail = ?, updated_at = ?
		WHERE id = ? AND status IN ('pending','ready','processing')`), nullBytes(problem), strOrNull(failureText(detail)), now.UnixMilli(), id)
	if err != nil {
		return fmt.Errorf("store: failing order %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("%w: order %s is settled already (or does not exist)", ErrWrongState, id)
	}
	return nil
}

// FailOrderAudited is FailOrder with ev, the failure's audit row (and
// its notification jobs), written in the same transaction: a crash or an
// outage between the two never leaves an invalid order without its
// certificate_issue_failed row, nor a row for an order that did not fail.
// ErrWrongState when the order is finished already (nothing is written).
func (db *DB) FailOrderAudited(ctx context.Context, id string, problem []byte, detail string, ev AuditEvent, now time.Time) error {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q(`UPDATE orders SET status = 'invalid', error = ?, failure_detail = ?, updated_at = ?
			WHERE id = ? AND status IN ('pending','ready','processing')`), nullBytes(problem), strOrNull(failureText(detail)), now.UnixMilli(), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return fmt.Errorf("%w: order %s is settled already (or does not exist)", ErrWrongState, id)
		}
		return db.insertAudit(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, ErrWrongState) {
		return fmt.Errorf("store: failing order %s: %w", id, err)
	}
	return err
}

const certCols = `id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, revoked_at, revocation_reason,
	issuer_key_id, renew_early_at, explanation_url, alternate_chains`

// GetCertificate reads a certificate of a profile.
func (db *DB) GetCertificate(ctx context.Context, profile, id string) (Certificate, error) {
	if !holdable(id) {
		return Certificate{}, fmt.Errorf("%w: certificate %q", ErrNotFound, id)
	}
	if fr := firstReadOf(ctx); fr.take(firstCertificate, id) {
		return fr.cert, fr.err
	}
	return scanCertificateRow(db.r.QueryRowContext(ctx, db.q(getCertificateQuery), profile, id), id)
}

const getCertificateQuery = `SELECT ` + certCols + ` FROM certificates WHERE profile = ? AND id = ?`

// scanCertificateRow reads getCertificateQuery's row.
func scanCertificateRow(row rowScanner, id string) (Certificate, error) {
	c, err := scanCertificate(row)
	if err := readErr(err, "certificate "+id); err != nil {
		return Certificate{}, err
	}
	return c, nil
}

// ReclaimStuckOrders takes over orders of a profile that have been
// processing since before cutoff — a finalize whose process died between
// claiming the order and recording the certificate — by touching them in
// a guarded write, so that one caller resumes each, and recording claimer
// ("" for none) as their claimer. It returns them with their CSR.
//
// An order with a live job (ready or running) of kind jobKind keyed by its
// id is not stuck: that job will finish it, and resuming the order beside
// it would sign it twice (one certificate recorded, the other thrown
// away). "" names no kind. Nor is one whose job of that kind an operator
// cancelled while it waited, its Abandon still owed (jobs.abandon_owed):
// that Abandon settles the order (failing it), and a resume beside it
// would race it. The two are two NOT EXISTS, each served by its partial
// index (jobs_live_key, jobs_abandon_owed): an OR of them would have
// SQLite read every job of the kind.
//
// On PostgreSQL the orders are picked FOR UPDATE SKIP LOCKED and the guard
// repeated on the update, so one caller takes each.
func (db *DB) ReclaimStuckOrders(ctx context.Context, profile string, cutoff, now time.Time, limit int, jobKind, claimer string) ([]Order, error) {
	return db.reclaimOrders(ctx, profile, `updated_at < ?`, cutoff.UnixMilli(), now, limit, jobKind, claimer)
}

// ReclaimOrdersClaimedBy is ReclaimStuckOrders for the processing orders
// of a profile that dead, a process incarnation the caller knows has
// exited, claimed, however recently: nothing works on them any more. The
// same orders are left alone (a live job of kind jobKind, an owed
// Abandon), and claimer is recorded as their claimer, so a second caller
// finds none of them.
func (db *DB) ReclaimOrdersClaimedBy(ctx context.Context, profile, dead string, now time.Time, limit int, jobKind, claimer string) ([]Order, error) {
	if dead == "" {
		return nil, nil
	}
	return db.reclaimOrders(ctx, profile, `claimed_by = ?`, dead, now, limit, jobKind, claimer)
}

func (db *DB) reclaimOrders(ctx context.Context, profile, pick string, pickArg any, now time.Time, limit int, jobKind, claimer string) ([]Order, error) {
	var out []Order
	err := db.wr.queryEach(ctx, db.q(db.dialect.reclaimStuckOrders(orderCols, pick)),
		[]any{now.UnixMilli(), strOrNull(claimer), profile, pickArg, jobKind, jobKind, limit, pickArg},
		func() { out = nil },
		func(r rowScanner) error {
			o, err := scanOrder(r)
			out = append(out, o)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: reclaiming stuck orders: %w", err)
	}
	return out, nil
}

// MaxAlternateChains bounds the alternate chains stored with a certificate: a
// CA offers one or two (a cross-signed root beside its own); more is an
// upstream gone wrong, and a row must stay bounded.
const MaxAlternateChains = 4

// alternatesColumn is the alternate_chains value of pems: a JSON array,
// "" for none.
func alternatesColumn(pems []string) (string, error) {
	if len(pems) == 0 {
		return "", nil
	}
	if len(pems) > MaxAlternateChains {
		return "", fmt.Errorf("%d alternate chains, at most %d are kept", len(pems), MaxAlternateChains)
	}
	b, err := json.Marshal(pems)
	return string(b), err
}
