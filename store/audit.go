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
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// AuditEvent is one row of the audit trail. Rows are never updated: the
// table refuses updates, and deletes other than PruneAudit's. Every string
// is bounded when the row is written (see Bounded).
type AuditEvent struct {
	ID          int64
	At          time.Time
	Event       string // e.g. certificate_issued, certificate_revoked, revocation_refused
	Outcome     string // success, failure, refused, interrupted
	Profile     string
	ActorKind   string // acme_account, certificate_key, admin, cli, system
	ActorID     string
	OrderID     string
	AccountID   string
	Identifiers []acme.Identifier
	Serial      string
	ClientIP    string
	ClientName  string // reverse DNS name of ClientIP; "" when unknown
	UserAgent   string
	Reason      string
	Detail      string

	// Jobs are stored in the same transaction as the row (never read
	// back): the notifications the event owes, so that an event recorded
	// is an event whose deliveries are queued, across any crash.
	Jobs []NewJob

	// DedupKey, when set, makes the row one of a kind (never read back):
	// a row whose key a stored row has already is not written, nor are
	// its Jobs, and the write succeeds. A retired job's Abandon sets it
	// (jobs.AbandonKey), so that an Abandon run again after a crash, or
	// tried again after an outage whose first write did land, records
	// its event once.
	DedupKey string
}

const auditCols = `id, at, event, outcome, profile, actor_kind, actor_id, order_id, account_id, identifiers, serial,
	client_ip, client_name, user_agent, reason, detail`

func scanAudit(r rowScanner) (AuditEvent, error) {
	var (
		e      AuditEvent
		at     int64
		idents string
	)
	if err := r.Scan(&e.ID, &at, &e.Event, &e.Outcome, &e.Profile, &e.ActorKind, &e.ActorID, &e.OrderID, &e.AccountID,
		&idents, &e.Serial, &e.ClientIP, &e.ClientName, &e.UserAgent, &e.Reason, &e.Detail); err != nil {
		return AuditEvent{}, err
	}
	e.At = ms(at)
	if err := json.Unmarshal([]byte(idents), &e.Identifiers); err != nil {
		return AuditEvent{}, fmt.Errorf("audit event %d identifiers: %w", e.ID, err)
	}
	return e, nil
}

// Bounds of the strings an audit row stores, most of them client-supplied
// or derived from what a client sent (a user agent, a serial, an error
// about a payload). A longer string is cut by Clip.
const (
	// AuditFieldMax bounds every field but the detail, in bytes.
	AuditFieldMax = 256
	// AuditDetailMax bounds the detail, in bytes: it may quote an error
	// from a signer's backend, which the operator wants whole when it fits.
	AuditDetailMax = 1024
	// CutMark ends a string that Clip cut.
	CutMark = "…[cut]"
)

// Clip bounds s to at most max bytes: a longer s is cut at a UTF-8
// character boundary and ends with CutMark, so a reader sees that it was
// cut. s is returned as is when it fits.
func Clip(s string, max int) string {
	return textcut.Clip(s, max, CutMark)
}

// Bounded returns ev with every string clipped to its bound (AuditFieldMax,
// AuditDetailMax for the detail), made valid text first (see text). Every row is bounded as it is written;
// callers that copy an event elsewhere (a notification) use it too.
func (ev AuditEvent) Bounded() AuditEvent {
	for _, f := range []*string{&ev.Event, &ev.Outcome, &ev.Profile, &ev.ActorKind, &ev.ActorID, &ev.OrderID, &ev.AccountID,
		&ev.Serial, &ev.ClientIP, &ev.ClientName, &ev.UserAgent, &ev.Reason} {
		*f = Clip(text(*f), AuditFieldMax)
	}
	ev.Detail = Clip(text(ev.Detail), AuditDetailMax)
	if len(ev.Identifiers) > 0 {
		ids := make([]acme.Identifier, len(ev.Identifiers))
		for i, id := range ev.Identifiers {
			ids[i] = acme.Identifier{Type: Clip(text(id.Type), AuditFieldMax), Value: Clip(text(id.Value), AuditFieldMax)}
		}
		ev.Identifiers = ids
	}
	return ev
}

// insertAudit writes ev, bounded, inside tx.
func (db *DB) insertAudit(ctx context.Context, tx *sql.Tx, ev AuditEvent) error {
	args, err := auditRow(ev)
	if err != nil {
		return err
	}
	if ev.DedupKey != "" {
		res, err := tx.ExecContext(ctx, db.q(`INSERT INTO audit_events (`+auditInsertCols+`, dedup_key)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING`), append(args, text(ev.DedupKey))...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return nil // written before, and its jobs queued with it
		}
		return db.enqueueAll(ctx, tx, ev.Jobs, ev.At)
	}
	if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO audit_events (`+auditInsertCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), args...); err != nil {
		return err
	}
	return db.enqueueAll(ctx, tx, ev.Jobs, ev.At)
}

// auditInsertCols are the columns an audit row is written with, auditRow
// their values.
const auditInsertCols = `at, event, outcome, profile, actor_kind, actor_id, order_id, account_id, identifiers, serial,
	client_ip, client_name, user_agent, reason, detail`

// auditRow is the values of ev's row, bounded, in auditInsertCols' order.
func auditRow(ev AuditEvent) ([]any, error) {
	if ev.Event == "" || ev.Outcome == "" {
		return nil, errors.New("store: an audit event needs an event and an outcome")
	}
	ev = ev.Bounded()
	idents := "[]"
	if len(ev.Identifiers) > 0 {
		b, err := json.Marshal(ev.Identifiers)
		if err != nil {
			return nil, fmt.Errorf("store: audit identifiers: %w", err)
		}
		idents = string(b)
	}
	return []any{ev.At.UnixMilli(), ev.Event, ev.Outcome, ev.Profile, ev.ActorKind, ev.ActorID, ev.OrderID, ev.AccountID, idents,
		ev.Serial, ev.ClientIP, ev.ClientName, ev.UserAgent, ev.Reason, ev.Detail}, nil
}

// InsertAudit appends one event to the audit trail.
//
// It only inserts (and enqueues, see EnqueueJob).
func (db *DB) InsertAudit(ctx context.Context, ev AuditEvent) error {
	if err := db.withTx(ctx, func(tx *sql.Tx) error { return db.insertAudit(ctx, tx, ev) }); err != nil {
		return fmt.Errorf("store: writing audit event %s: %w", ev.Event, err)
	}
	return nil
}

// InsertAudits appends several events in one transaction: all or none.
//
// It only inserts (and enqueues, see EnqueueJob).
func (db *DB) InsertAudits(ctx context.Context, evs []AuditEvent) error {
	if len(evs) == 0 {
		return nil
	}
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		for _, ev := range evs {
			if err := db.insertAudit(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: writing %d audit events: %w", len(evs), err)
	}
	return nil
}

// IssueOrder stores the certificate, moves the order from processing to
// valid, writes the issuance's audit row and takes spends from their rate
// limit buckets, in one transaction: an issued certificate always has its
// row, and the issuance costs one commit.
//
// The guarded update of the order comes first, so of concurrent issuances
// of an order one stores a certificate and spends (the others find it
// valid and change nothing).
//
// spends are what the certificate counts in the profile's limits
// (duplicate_certificates, checked when its order was created). They never
// refuse it: each moves its bucket as SpendLimits would, and one that does
// not fit is dropped (see ratelimits_issue.go). Their keys are distinct,
// and none is CheckOnly or PendingAuthzs.
func (db *DB) IssueOrder(ctx context.Context, c Certificate, ev AuditEvent, now time.Time, spends ...LimitSpend) (Certificate, error) {
	c.ID = NewID()
	if err := checkIssueSpends(spends); err != nil {
		return c, fmt.Errorf("store: issuing order %s: %w", c.OrderID, err)
	}
	alts, err := alternatesColumn(c.AlternatesPEM)
	if err != nil {
		return c, fmt.Errorf("store: issuing order %s: %w", c.OrderID, err)
	}
	if stmt := db.dialect.issueOrder(len(spends)); stmt != "" && len(ev.Jobs) == 0 {
		// The writes in one statement, a write of its own: on
		// PostgreSQL one round trip instead of a transaction's five.
		audit, err := auditRow(ev)
		if err != nil {
			return c, fmt.Errorf("store: issuing order %s: %w", c.OrderID, err)
		}
		args := append([]any{c.ID, now.UnixMilli(), c.OrderID,
			c.ID, c.Profile, c.AccountID, c.Serial, c.ChainPEM, c.PublicKey, c.NotBefore.UnixMilli(), c.NotAfter.UnixMilli(), now.UnixMilli(), c.IssuerKeyID, alts},
			audit...)
		for _, s := range spends {
			args = append(args, issueSpendArgs(s, now.UnixNano())...)
		}
		var n int
		switch err := db.wr.QueryRowContext(ctx, db.q(stmt), args...).Scan(&n); {
		case err != nil:
			return c, fmt.Errorf("store: issuing order %s: %w", c.OrderID, err)
		case n != 1:
			return c, fmt.Errorf("%w: order %s is not processing", ErrWrongState, c.OrderID)
		}
		return c, nil
	}
	err = db.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q(`UPDATE orders SET status = 'valid', certificate_id = ?, updated_at = ?
			WHERE id = ? AND status = 'processing'`), c.ID, now.UnixMilli(), c.OrderID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: order %s is not processing", ErrWrongState, c.OrderID)
		}
		if _, err = tx.ExecContext(ctx, db.q(`INSERT INTO certificates
			(id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, created_at, issuer_key_id, alternate_chains)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			c.ID, c.OrderID, c.Profile, c.AccountID, c.Serial, c.ChainPEM, c.PublicKey,
			c.NotBefore.UnixMilli(), c.NotAfter.UnixMilli(), now.UnixMilli(), c.IssuerKeyID, alts); err != nil {
			return err
		}
		for _, s := range spends {
			if _, err := tx.ExecContext(ctx, db.q(issueSpendSQL), issueSpendArgs(s, now.UnixNano())...); err != nil {
				return err
			}
		}
		return db.insertAudit(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, ErrWrongState) {
		err = fmt.Errorf("store: issuing order %s: %w", c.OrderID, err)
	}
	return c, err
}

// AuditFilter selects audit events. Zero fields do not filter.
type AuditFilter struct {
	Profile   string
	Event     string
	Outcome   string
	OrderID   string
	AccountID string
	Serial    string
	Since     time.Time // at or after
	Until     time.Time // before
	BeforeID  int64     // page: only events with a smaller id
	Limit     int       // default 100, at most 1000
}

// SearchAudit returns matching audit events, newest first.
func (db *DB) SearchAudit(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	if !allHoldable(f.Profile, f.Event, f.Outcome, f.OrderID, f.AccountID, f.Serial) {
		return nil, nil
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) { where, args = append(where, cond), append(args, v) }
	for _, c := range [...]struct{ col, v string }{{"profile", f.Profile}, {"event", f.Event}, {"outcome", f.Outcome},
		{"order_id", f.OrderID}, {"account_id", f.AccountID}, {"serial", f.Serial}} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if !f.Since.IsZero() {
		add("at >= ?", f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		add("at < ?", f.Until.UnixMilli())
	}
	if f.BeforeID > 0 {
		add("id < ?", f.BeforeID)
	}
	f.Limit = PageLimit(f.Limit)
	stmt := `SELECT ` + auditCols + ` FROM audit_events`
	if len(where) > 0 {
		stmt += ` WHERE ` + strings.Join(where, " AND ")
	}
	stmt += ` ORDER BY id DESC LIMIT ?`
	rows, err := db.r.QueryContext(ctx, db.q(stmt), append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: searching the audit trail: %w", err)
	}
	defer rows.Close()
	var out []AuditEvent
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("store: searching the audit trail: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// AuditPruneBatch is how many audit rows PruneAudit deletes per
// transaction by default: small enough that a prune of millions of rows
// never holds the write lock for long.
const AuditPruneBatch = 500

// PruneAudit deletes the audit rows older than before, batch rows (default
// AuditPruneBatch) per transaction, and returns how many it deleted. It is
// the only statement the table lets delete: each batch writes its cutoff to
// audit_prune_cutoff, deletes, and removes the cutoff again. record, when
// not nil, is asked in the transaction of the last batch for the row that
// records the prune, given the total deleted and stopped nil; ok=false
// writes none. Between batches the prune stops when ctx ends, returning
// what it deleted so far. A prune that stops part way (ctx ended, a batch
// failed) after deleting rows asks record for the row of those it
// deleted, with stopped the error it stopped with, and writes it on its
// own, past ctx's end: the batches it committed are never left without a
// row saying they were deleted, unless the database refuses that write
// too (then both errors are returned). Nor when its process ends between
// two batches: each batch but the last rewrites, in its transaction, the
// row record gives for what was deleted so far with stopped
// ErrPruneUnfinished (prune_progress), which RecordUnfinishedPrunes
// writes to the trail should no other row end the prune. That row's time
// is clk's (the wall clock when nil), the clock of whoever prunes, which
// the sweep comparing it reads too.
//
// The cutoff row has a fixed key: a concurrent prune's insert of it waits
// for this batch, which has deleted it again by its commit.
func (db *DB) PruneAudit(ctx context.Context, before time.Time, batch int, clk clock.Clock,
	record func(deleted int64, stopped error) (ev AuditEvent, ok bool)) (int64, error) {
	if batch <= 0 {
		batch = AuditPruneBatch
	}
	var (
		total    int64
		progress = pruneProgress{clock: clk}
	)
	defer progress.stop()
	stopped := func(err error) (int64, error) {
		err = fmt.Errorf("store: pruning the audit trail: %w", err)
		if total == 0 || record == nil {
			return total, err
		}
		return total, db.recordStopped(ctx, err, &progress, func() (AuditEvent, bool) { return record(total, err) })
	}
	for {
		if err := ctx.Err(); err != nil {
			return stopped(err)
		}
		var n int64
		err := db.withTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO audit_prune_cutoff (id, before) VALUES (1, ?)`), before.UnixMilli()); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, db.q(`DELETE FROM audit_events WHERE id IN
				(SELECT id FROM audit_events WHERE at < ? ORDER BY at LIMIT ?)`), before.UnixMilli(), batch)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM audit_prune_cutoff`); err != nil {
				return err
			}
			switch {
			case record == nil:
			case n < int64(batch):
				if err := progress.end(ctx, db, tx); err != nil {
					return err
				}
				if ev, ok := record(total+n, nil); ok {
					return db.insertAudit(ctx, tx, ev)
				}
			default:
				if ev, ok := record(total+n, ErrPruneUnfinished); ok {
					return progress.note(ctx, db, tx, ev)
				}
			}
			return nil
		})
		if err != nil {
			return stopped(err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// recordStopped keeps a delete in batches that stopped part way with err
// (its ctx ended, a batch failed) after committing some from leaving them
// unrecorded: it asks record for the row of what was deleted so far and,
// unless ok is false, writes it on its own, past ctx's end. It returns
// err, joined by the write's error when the database refuses that too.
// Its progress row then stays, for RecordUnfinishedPrunes, but no longer
// saying that the process ended: the row of the stop replaces it there
// (keep), or, should the database refuse that as well, db in this process
// keeps it for its next RecordUnfinishedPrunes. The delete records
// itself in its last batch's transaction when it runs to the end; this
// is the row of one that did not, written with the deletion of its
// progress row.
func (db *DB) recordStopped(ctx context.Context, err error, progress *pruneProgress, record func() (AuditEvent, bool)) error {
	ev, ok := record()
	if !ok {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if werr := db.withTx(ctx, func(tx *sql.Tx) error {
		if err := progress.end(ctx, db, tx); err != nil {
			return err
		}
		return db.insertAudit(ctx, tx, ev)
	}); werr != nil {
		if progress.written {
			if kerr := progress.keep(ctx, db, ev); kerr != nil {
				progress.rememberStop(db, ev)
			}
		}
		return fmt.Errorf("%w; recording what it had deleted: %w", err, werr)
	}
	return err
}

// MaxPage is the most items one page of a list holds.
const MaxPage = 1000

// PageLimit is the one page-limit rule of every list the operators read:
// n items, by default 100, at most MaxPage.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > MaxPage:
		return MaxPage
	}
	return n
}
