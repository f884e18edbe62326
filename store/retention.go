package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
)

// Retention says what PruneRetention deletes. A zero cutoff deletes
// nothing of its kind.
type Retention struct {
	// OrdersBefore prunes an order that never got a certificate —
	// invalid, or pending or ready and so expired — once it expired, last
	// changed, and its authorizations expired, all before OrdersBefore;
	// with its authorizations, challenges, identifier rows and relay
	// mapping. An order processing is never pruned (a signer or the
	// resume sweep still owes it an answer). It also prunes a deactivated
	// account unchanged since before OrdersBefore that has no order left.
	OrdersBefore time.Time
	// CertificatesBefore prunes a certificate whose notAfter lies before
	// it, with its revocation ledger row and its order (as above), unless
	// an authorization of that order is still unexpired at Now, or it was
	// revoked for keyCompromise: its row is what keeps its key from being
	// certified again (KeyRevokedForCompromise), for good.
	CertificatesBefore time.Time
	// Now is the sweep's time.
	Now time.Time
	// BatchOrders bounds the orders (certificates, accounts) one
	// transaction deletes; default RetentionBatchOrders.
	BatchOrders int
	// BatchAuthorizations bounds the authorizations one transaction
	// deletes, each with its challenges, beyond the first order of the
	// batch; default RetentionBatchAuthorizations.
	BatchAuthorizations int
	// Record, when not nil, is asked for the audit row that records the
	// sweep, given what it deleted (LongestBatch measured up to the
	// asking) and stopped nil; ok=false writes none. It is asked in the
	// transaction of the last batch, and the row written there: the last
	// deletions and their record are one write. A sweep that stops part
	// way after deleting something asks it for the row of what it
	// deleted so far, with stopped the error it stopped with, written on
	// its own (as PruneAudit's). Each batch but the last asks it for the
	// row of what the sweep deleted so far with stopped
	// ErrPruneUnfinished, kept in the batch's transaction for
	// RecordUnfinishedPrunes should the sweep's process end before the
	// next (as PruneAudit's).
	Record func(deleted Pruned, stopped error) (ev AuditEvent, ok bool)
}

// Default batch bounds of PruneRetention: each batch is one write
// transaction, and on SQLite every other write waits for it, so a batch is
// about a thousand rows, whatever the backlog (see
// BenchmarkRetentionSweepOfABacklog for what one costs).
const (
	RetentionBatchOrders         = 100
	RetentionBatchAuthorizations = 200
)

// Pruned is what PruneRetention deleted.
type Pruned struct {
	Orders         int64
	Authorizations int64
	Challenges     int64
	Certificates   int64
	Revocations    int64
	Accounts       int64
	// Batches counts the write transactions, and LongestBatch is the
	// longest of them (from handing it to the write engine to its commit).
	Batches      int
	LongestBatch time.Duration
}

// Any reports whether anything was deleted.
func (p Pruned) Any() bool {
	return p.Orders+p.Authorizations+p.Challenges+p.Certificates+p.Revocations+p.Accounts > 0
}

func (p *Pruned) add(b Pruned) {
	p.Orders += b.Orders
	p.Authorizations += b.Authorizations
	p.Challenges += b.Challenges
	p.Certificates += b.Certificates
	p.Revocations += b.Revocations
	p.Accounts += b.Accounts
}

// PruneRetention deletes what r says is no longer needed, in small
// batches, each its own transaction that selects what still qualifies and
// deletes it: expired certificates with their orders first, then orders
// without a certificate, then the deactivated accounts this leaves empty.
// Sweeps running at once — two instances on one database — delete each
// row once between them, and neither fails: SQLite's writer makes every
// batch see the rows the other already took as gone, and on PostgreSQL
// (READ COMMITTED) a batch locks the certificates or orders it picks, so
// that another sweep's pick waits for it and then skips the rows it
// deleted, and a DELETE counts only the rows it deleted itself. The lock
// also keeps a revocation of a certificate being pruned from adding a
// ledger row the batch would not delete: the revocation's guarded update
// waits, and then finds no certificate. (A deactivated account is deleted
// in one statement, guarded on having no order; a new order of it at that
// moment, which the account's status refuses anyway, would fail on its
// foreign key.) Between batches the sweep stops when ctx ends, returning
// what it deleted so far (and recording it, see Retention.Record).
func (db *DB) PruneRetention(ctx context.Context, r Retention) (Pruned, error) {
	if r.BatchOrders <= 0 {
		r.BatchOrders = RetentionBatchOrders
	}
	if r.BatchAuthorizations <= 0 {
		r.BatchAuthorizations = RetentionBatchAuthorizations
	}
	var total Pruned
	phases := []struct {
		what  string
		on    bool
		batch func(ctx context.Context, tx *sql.Tx, b *Pruned) (more bool, err error)
	}{
		{"expired certificates", !r.CertificatesBefore.IsZero(), func(ctx context.Context, tx *sql.Tx, b *Pruned) (bool, error) {
			return db.pruneOrderBatch(ctx, tx, r, b, `SELECT c.order_id, c.id,
					(SELECT COUNT(*) FROM authorizations a WHERE a.order_id = c.order_id)
				FROM certificates c
				WHERE c.not_after < ?
				AND (c.revocation_reason IS NULL OR c.revocation_reason <> 1)
				AND NOT EXISTS (SELECT 1 FROM authorizations a WHERE a.order_id = c.order_id AND a.expires_at > ?)
				LIMIT ?`, r.CertificatesBefore.UnixMilli(), r.Now.UnixMilli(), r.BatchOrders)
		}},
		{"orders", !r.OrdersBefore.IsZero(), func(ctx context.Context, tx *sql.Tx, b *Pruned) (bool, error) {
			cut := r.OrdersBefore.UnixMilli()
			return db.pruneOrderBatch(ctx, tx, r, b, `SELECT o.id, '',
					(SELECT COUNT(*) FROM authorizations a WHERE a.order_id = o.id)
				FROM orders o
				WHERE o.status IN ('pending','ready','invalid') AND o.expires_at < ? AND o.updated_at < ?
				AND o.certificate_id IS NULL
				AND NOT EXISTS (SELECT 1 FROM certificates c WHERE c.order_id = o.id)
				AND NOT EXISTS (SELECT 1 FROM authorizations a WHERE a.order_id = o.id AND a.expires_at >= ?)
				LIMIT ?`, cut, cut, cut, r.BatchOrders)
		}},
		{"accounts", !r.OrdersBefore.IsZero(), func(ctx context.Context, tx *sql.Tx, b *Pruned) (bool, error) {
			res, err := tx.ExecContext(ctx, db.q(`DELETE FROM accounts WHERE id IN (SELECT a.id FROM accounts a
				WHERE a.status = 'deactivated' AND a.updated_at < ?
				AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.account_id = a.id)
				LIMIT ?)`), r.OrdersBefore.UnixMilli(), r.BatchOrders)
			if err != nil {
				return false, err
			}
			if b.Accounts, err = res.RowsAffected(); err != nil {
				return false, err
			}
			return b.Accounts == int64(r.BatchOrders), nil
		}},
	}
	last := -1
	for i, ph := range phases {
		if ph.on {
			last = i
		}
	}
	progress := pruneProgress{clock: clock.At(r.Now)}
	defer progress.stop()
	stopped := func(what string, err error) (Pruned, error) {
		err = fmt.Errorf("store: pruning %s: %w", what, err)
		if !total.Any() || r.Record == nil {
			return total, err
		}
		return total, db.recordStopped(ctx, err, &progress, func() (AuditEvent, bool) { return r.Record(total, err) })
	}
	for i, ph := range phases {
		for more := ph.on; more; {
			if err := ctx.Err(); err != nil {
				return stopped(ph.what, err)
			}
			var b Pruned
			began := time.Now()
			err := db.withTx(ctx, func(tx *sql.Tx) error {
				b = Pruned{} // fn may run again (see engine)
				var err error
				if more, err = ph.batch(ctx, tx, &b); err != nil || r.Record == nil {
					return err
				}
				all := total
				all.add(b)
				all.Batches++
				all.LongestBatch = max(all.LongestBatch, time.Since(began))
				if more || i != last {
					if !b.Any() {
						return nil // nothing more to record
					}
					if ev, ok := r.Record(all, ErrPruneUnfinished); ok {
						return progress.note(ctx, db, tx, ev)
					}
					return nil
				}
				if err := progress.end(ctx, db, tx); err != nil {
					return err
				}
				if ev, ok := r.Record(all, nil); ok {
					return db.insertAudit(ctx, tx, ev)
				}
				return nil
			})
			took := time.Since(began)
			if err != nil {
				return stopped(ph.what, err)
			}
			total.add(b)
			total.Batches++
			total.LongestBatch = max(total.LongestBatch, took)
		}
	}
	return total, nil
}

// pruneOrderBatch deletes, in tx, one batch of the orders sel selects —
// rows of (order id, certificate id or "", its authorizations), at most
// r.BatchOrders of them — with everything that hangs off them. It takes
// orders while their authorizations stay within r.BatchAuthorizations,
// and at least one. more reports whether sel may have more.
func (db *DB) pruneOrderBatch(ctx context.Context, tx *sql.Tx, r Retention, b *Pruned, sel string, args ...any) (more bool, err error) {
	rows, err := tx.QueryContext(ctx, db.q(sel+db.dialect.rowLock()), args...)
	if err != nil {
		return false, err
	}
	var (
		orders, certs []any
		weight, seen  int
	)
	for rows.Next() {
		var (
			order, cert string
			authzs      int
		)
		if err := rows.Scan(&order, &cert, &authzs); err != nil {
			rows.Close()
			return false, err
		}
		seen++
		if len(orders) > 0 && weight+authzs > r.BatchAuthorizations {
			continue
		}
		weight += authzs
		orders = append(orders, order)
		if cert != "" {
			certs = append(certs, cert)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if len(orders) == 0 {
		return false, nil
	}
	in := func(args []any) string { return "(" + strings.TrimSuffix(strings.Repeat("?,", len(args)), ",") + ")" }
	del := func(n *int64, stmt string, args []any) error {
		res, err := tx.ExecContext(ctx, db.q(stmt), args...)
		if err != nil {
			return err
		}
		got, err := res.RowsAffected()
		if n != nil {
			*n = got
		}
		return err
	}
	// Children first: every foreign key points from them to what follows.
	type step struct {
		n    *int64
		stmt string
		args []any
	}
	steps := []step{
		{&b.Challenges, `DELETE FROM challenges WHERE authz_id IN (SELECT id FROM authorizations WHERE order_id IN ` + in(orders) + `)`, orders},
		{&b.Authorizations, `DELETE FROM authorizations WHERE order_id IN ` + in(orders), orders},
		{nil, `DELETE FROM order_identifiers WHERE order_id IN ` + in(orders), orders},
		{nil, `DELETE FROM relay_orders WHERE order_id IN ` + in(orders), orders},
		{nil, `DELETE FROM relay_placements WHERE order_id IN ` + in(orders), orders},
	}
	if len(certs) > 0 {
		steps = append(steps,
			step{&b.Revocations, `DELETE FROM revocations WHERE certificate_id IN ` + in(certs), certs},
			step{&b.Certificates, `DELETE FROM certificates WHERE id IN ` + in(certs), certs})
	}
	steps = append(steps, step{&b.Orders, `DELETE FROM orders WHERE id IN ` + in(orders), orders})
	for _, s := range steps {
		if err := del(s.n, s.stmt, s.args); err != nil {
			return false, err
		}
	}
	return seen == r.BatchOrders || len(orders) < seen, nil
}
