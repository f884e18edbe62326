package store

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"

	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// AuditEvent is one row of the audit trail. Rows are only ever inserted:
// the table refuses updates and deletes.
type AuditEvent struct {
	ID          int64
	At          time.Time
	Event       string // e.g. certificate_issued, certificate_revoked, revocation_refused
	Outcome     string // success, failure, refused
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

// insertAudit writes ev inside tx.
func (db *DB) insertAudit(ctx context.Context, tx *sql.Tx, ev AuditEvent) error {
	if ev.Event == "" || ev.Outcome == "" {
		return errors.New("store: an audit event needs an event and an outcome")
	}
	idents := "[]"
	if len(ev.Identifiers) > 0 {
		b, err := json.Marshal(ev.Identifiers)
		if err != nil {
			return fmt.Errorf("store: audit identifiers: %w", err)
		}
		idents = string(b)
	}
	_, err := tx.ExecContext(ctx, db.q(`INSERT INTO audit_events
		(at, event, outcome, profile, actor_kind, actor_id, order_id, account_id, identifiers, serial,
		 client_ip, client_name, user_agent, reason, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		ev.At.UnixMilli(), ev.Event, ev.Outcome, ev.Profile, ev.ActorKind, ev.ActorID, ev.OrderID, ev.AccountID, idents,
		ev.Serial, ev.ClientIP, ev.ClientName, ev.UserAgent, ev.Reason, ev.Detail)
	if err != nil {
		return err
	}
	return db.enqueueAll(ctx, tx, ev.Jobs, ev.At)
}

// InsertAudit appends one event to the audit trail.
func (db *DB) InsertAudit(ctx context.Context, ev AuditEvent) error {
	if err := db.withTx(ctx, func(tx *sql.Tx) error { return db.insertAudit(ctx, tx, ev) }); err != nil {
		return fmt.Errorf("store: writing audit event %s: %w", ev.Event, err)
	}
	return nil
}

// IssueOrder stores the certificate, moves the order from processing to
// valid, and writes the issuance's audit row, in one transaction: an
// issued certificate always has its row, and the issuance costs one commit.
func (db *DB) IssueOrder(ctx context.Context, c Certificate, ev AuditEvent, now time.Time) (Certificate, error) {
	c.ID = NewID()
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q(`UPDATE orders SET status = 'valid', certificate_id = ?, updated_at = ?
			WHERE id = ? AND status = 'processing'`), c.ID, now.UnixMilli(), c.OrderID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: order %s is not processing", ErrWrongState, c.OrderID)
		}
		if _, err = tx.ExecContext(ctx, db.q(`INSERT INTO certificates
			(id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			c.ID, c.OrderID, c.Profile, c.AccountID, c.Serial, c.ChainPEM, c.PublicKey,
			c.NotBefore.UnixMilli(), c.NotAfter.UnixMilli(), now.UnixMilli()); err != nil {
			return err
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
	f.Limit = pageLimit(f.Limit)
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

// pageLimit bounds a page: default 100, at most 1000.
func pageLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}
