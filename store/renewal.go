package store

import (
	"context"
	"database/sql"
	"fmt"
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

// RenewEarly stamps the selected certificates with an operator's request
// to renew early, at now, with explanationURL (which may be ""), and
// writes one audit row per certificate from ev (its serial, order and
// account filled in), in one transaction. It returns the certificates
// stamped. A certificate asked again is stamped again: its window moves
// to the later request, which still lies before any later answer.
//
// One update (its guards re-checked on each certificate's newest row)
// whose returned rows are the audit rows' subjects.
func (db *DB) RenewEarly(ctx context.Context, sel RenewEarlySelection, explanationURL string, ev AuditEvent, now time.Time) ([]Certificate, error) {
	if sel.Empty() {
		return nil, fmt.Errorf("store: renew early: the selection names no certificate")
	}
	if len(sel.Serials) > MaxRenewEarlyList || len(sel.OrderIDs) > MaxRenewEarlyList {
		return nil, fmt.Errorf("store: renew early: at most %d serials and %d orders at once", MaxRenewEarlyList, MaxRenewEarlyList)
	}
	// The SET's placeholders first, then the WHERE's.
	where := []string{"not_after > ?", "revoked_at IS NULL"}
	args := []any{now.UnixMilli(), explanationURL, now.UnixMilli()}
	add := func(cond string, vs ...any) { where, args = append(where, cond), append(args, vs...) }
	in := func(col string, vs []string) {
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(vs)), ", ")
		anys := make([]any, len(vs))
		for i, v := range vs {
			anys[i] = v
		}
		add(col+" IN ("+marks+")", anys...)
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
	stmt := `UPDATE certificates SET renew_early_at = ?, explanation_url = ? WHERE ` + strings.Join(where, " AND ") +
		` RETURNING ` + certCols
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
		for _, c := range out {
			e := ev
			e.Profile, e.Serial, e.OrderID, e.AccountID = c.Profile, c.Serial, c.OrderID, c.AccountID
			if err := db.insertAudit(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: renew early: %w", err)
	}
	return out, nil
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
