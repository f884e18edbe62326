package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// RenewEarlySelection chooses the certificates an operator asks to be
// renewed early (RFC 9773). Every field set must match (they combine with
// AND); at least one besides Profile must be set. Only certificates that
// have not expired and are not revoked are chosen: a revoked
// certificate's window already lies in the past.
type RenewEarlySelection struct {
	Profile  string   // only this profile's certificates; "" for any
	Serials  []string // lower-case hex, as Certificate.Serial
	OrderIDs []string
	// Identifier is a pattern over the identifiers of the certificate's
	// order: the value itself, or with "*" standing for any run of
	// characters ("*.example.com" matches every name below example.com,
	// and the wildcard identifier itself).
	Identifier  string
	AccountID   string
	IssuerKeyID string // as Certificate.IssuerKeyID
}

// MaxRenewEarlyList bounds the serials and order ids of one selection.
const MaxRenewEarlyList = 1000

// Empty reports whether the selection names nothing but (perhaps) a
// profile, which would choose every certificate of it.
func (s RenewEarlySelection) Empty() bool {
	return len(s.Serials) == 0 && len(s.OrderIDs) == 0 && s.Identifier == "" && s.AccountID == "" && s.IssuerKeyID == ""
}

// likePattern turns an identifier pattern ("*" for any run) into a LIKE
// pattern with '\' as its escape.
func likePattern(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(strings.ToLower(p))
}

// RenewEarlyBatch is how many certificates one of RenewEarly's
// transactions stamps, with their audit rows. A selection by issuer (a CA
// rotation) may hold a whole fleet: stamped in one transaction it would
// hold the database's writes — every instance's issuance — for as long as
// it takes, and every row it returned in memory.
const RenewEarlyBatch = 100

// RenewedEarly is what RenewEarly stamped: Count certificates, the first
// of them (in id order) up to the number asked for.
type RenewedEarly struct {
	Count int
	First []Certificate
}

// RenewEarly stamps the selected certificates with an operator's request
// to renew early, at now, with explanationURL (which may be ""), and
// writes one audit row per certificate from ev (its serial, order and
// account filled in) in the transaction that stamps it. It returns how
// many it stamped and the first keep of them. A certificate asked again
// is stamped again: its window moves to the later request, which still
// lies before any later answer.
//
// The selection's ids are read first, in one query whose snapshot ends
// with it — a read held open across the writes would keep SQLite from
// checkpointing its WAL, which would grow with every batch (tens of bytes
// an id in memory instead: ~40 MB for a million) — then stamped batch
// (RenewEarlyBatch when 0) at a time, each batch with its audit rows in
// one transaction, its guards (unexpired, not revoked) re-checked on each
// certificate's newest row. An error part way (the database gone, a
// deadline) keeps the batches committed, each stamp with its audit row,
// and returns them with the error: asking again stamps the rest.
func (db *DB) RenewEarly(ctx context.Context, sel RenewEarlySelection, explanationURL string, ev AuditEvent, now time.Time,
	batch, keep int) (RenewedEarly, error) {
	var done RenewedEarly
	if sel.Empty() {
		return done, fmt.Errorf("store: renew early: the selection names no certificate")
	}
	if len(sel.Serials) > MaxRenewEarlyList || len(sel.OrderIDs) > MaxRenewEarlyList {
		return done, fmt.Errorf("store: renew early: at most %d serials and %d orders at once", MaxRenewEarlyList, MaxRenewEarlyList)
	}
	if batch <= 0 {
		batch = RenewEarlyBatch
	}
	ids, err := db.renewEarlySelected(ctx, sel, now)
	if err != nil {
		return done, fmt.Errorf("store: renew early: %w", err)
	}
	for len(ids) > 0 {
		n := min(batch, len(ids))
		stamped, err := db.renewEarlyBatch(ctx, ids[:n], explanationURL, ev, now)
		if err != nil {
			return done, fmt.Errorf("store: renew early, after %d certificates: %w", done.Count, err)
		}
		ids = ids[n:]
		done.Count += len(stamped)
		done.First = append(done.First, stamped[:min(len(stamped), max(keep-len(done.First), 0))]...)
	}
	return done, nil
}

// renewEarlySelected reads the ids of the certificates sel selects that
// are unexpired and not revoked at now, in id order.
func (db *DB) renewEarlySelected(ctx context.Context, sel RenewEarlySelection, now time.Time) ([]string, error) {
	where, args := renewEarlyWhere(sel, now)
	ids, err := queryStrings(ctx, db.r, db.q(`SELECT id FROM certificates WHERE `+where+` ORDER BY id`), args...)
	return ids, db.unavailable(err)
}

// renewEarlyWhere is the condition (and its arguments) of the
// certificates sel selects that are unexpired and not revoked at now.
func renewEarlyWhere(sel RenewEarlySelection, now time.Time) (string, []any) {
	where := []string{"not_after > ?", "revoked_at IS NULL"}
	args := []any{now.UnixMilli()}
	add := func(cond string, vs ...any) { where, args = append(where, cond), append(args, vs...) }
	in := func(col string, vs []string) {
		anys := make([]any, len(vs))
		for i, v := range vs {
			anys[i] = v
		}
		add(col+" IN ("+marks(len(vs))+")", anys...)
	}
	if sel.Profile != "" {
		add("profile = ?", sel.Profile)
	}
	if len(sel.Serials) > 0 {
		in("serial", sel.Serials)
	}
	if len(sel.OrderIDs) > 0 {
		in("order_id", sel.OrderIDs)
	}
	if sel.AccountID != "" {
		add("account_id = ?", sel.AccountID)
	}
	if sel.IssuerKeyID != "" {
		add("issuer_key_id = ?", strings.ToLower(sel.IssuerKeyID))
	}
	if sel.Identifier != "" {
		add(`EXISTS (SELECT 1 FROM order_identifiers i WHERE i.order_id = certificates.order_id AND i.value LIKE ? ESCAPE '\')`,
			likePattern(sel.Identifier))
	}
	return strings.Join(where, " AND "), args
}

// renewEarlyBatch stamps the certificates ids that are still unexpired
// and not revoked, and writes their audit rows, in one transaction; it
// returns the certificates stamped, in id order.
//
// One update (its guards re-checked on each certificate's newest row)
// whose returned rows are the audit rows' subjects.
func (db *DB) renewEarlyBatch(ctx context.Context, ids []string, explanationURL string, ev AuditEvent, now time.Time) ([]Certificate, error) {
	args := []any{now.UnixMilli(), explanationURL, now.UnixMilli()}
	for _, id := range ids {
		args = append(args, id)
	}
	stmt := `UPDATE certificates SET renew_early_at = ?, explanation_url = ? WHERE not_after > ? AND revoked_at IS NULL AND id IN (` + marks(len(ids)) + `) RETURNING ` + certCols
	var out []Certificate
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		out = nil // fn may run again (see engine)
		rows, err := tx.QueryContext(ctx, db.q(stmt), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			c, err := scanCertificate(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, c)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		slices.SortFunc(out, func(a, b Certificate) int { return strings.Compare(a.ID, b.ID) })
		for _, c := range out {
			e := ev
			e.Profile, e.Serial, e.OrderID, e.AccountID = c.Profile, c.Serial, c.OrderID, c.AccountID
			if err := db.insertAudit(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// UnnamedIssuer is a certificate stored before its issuer was recorded.
type UnnamedIssuer struct {
	ID       string
	ChainPEM string
}

// unnamedIssuersSQL is CertificatesWithoutIssuer's statement: it reads
// certificates_unnamed_issuer, which holds only the certificates without
// an issuer, in id order.
const unnamedIssuersSQL = `SELECT id, chain_pem FROM certificates
	WHERE issuer_key_id = '' AND not_after > ? AND id > ? ORDER BY id LIMIT ?`

// CertificatesWithoutIssuer lists up to limit unexpired certificates
// without an issuer key id, by id after the id after ("" for the first),
// so that a caller can name their issuers (see SetCertificateIssuer)
// page by page, skipping one it cannot name.
func (db *DB) CertificatesWithoutIssuer(ctx context.Context, after string, now time.Time, limit int) ([]UnnamedIssuer, error) {
	rows, err := db.r.QueryContext(ctx, db.q(unnamedIssuersSQL), now.UnixMilli(), after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: certificates without an issuer: %w", err)
	}
	defer rows.Close()
	var out []UnnamedIssuer
	for rows.Next() {
		var u UnnamedIssuer
		if err := rows.Scan(&u.ID, &u.ChainPEM); err != nil {
			return nil, fmt.Errorf("store: certificates without an issuer: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// SetCertificateIssuer records the issuer key id of a certificate that
// has none yet.
//
// One guarded statement.
func (db *DB) SetCertificateIssuer(ctx context.Context, id, issuerKeyID string) error {
	if _, err := db.wr.ExecContext(ctx, db.q(`UPDATE certificates SET issuer_key_id = ? WHERE id = ? AND issuer_key_id = ''`),
		issuerKeyID, id); err != nil {
		return fmt.Errorf("store: naming the issuer of certificate %s: %w", id, err)
	}
	return nil
}
