package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// Revocation is one row of the revocation ledger.
type Revocation struct {
	ID            int64 // ledger sequence, assigned when recorded
	CertificateID string
	Profile       string
	OrderID       string
	Serial        string // lower-case hex, as certificates.serial
	// IssuerKeyID names the local CA whose CRL lists the entry; "" when a
	// backend (an upstream CA, a script) was told instead.
	IssuerKeyID string
	Reason      *int // RFC 5280 CRLReason; nil for none
	RevokedAt   time.Time
	NotAfter    time.Time // the certificate's: past it, CRLs drop the entry
	ActorKind   string
	ActorID     string
}

func scanCertificate(r rowScanner) (Certificate, error) {
	var (
		c         Certificate
		nb, na    int64
		revokedAt sql.NullInt64
		reason    sql.NullInt64
		early     sql.NullInt64
		alts      string
	)
	if err := r.Scan(&c.ID, &c.OrderID, &c.Profile, &c.AccountID, &c.Serial, &c.ChainPEM, &c.PublicKey,
		&nb, &na, &revokedAt, &reason, &c.IssuerKeyID, &early, &c.ExplanationURL, &alts); err != nil {
		return Certificate{}, err
	}
	if alts != "" {
		if err := json.Unmarshal([]byte(alts), &c.AlternatesPEM); err != nil {
			return Certificate{}, fmt.Errorf("certificate %s: its alternate chains: %w", c.ID, err)
		}
	}
	c.NotBefore, c.NotAfter, c.RevokedAt, c.RenewEarlyAt = ms(nb), ms(na), nullMs(revokedAt), nullMs(early)
	c.Reason = nullInt(reason)
	return c, nil
}

func nullInt(v sql.NullInt64) *int {
	if !v.Valid {
		return nil
	}
	i := int(v.Int64)
	return &i
}

func intOrNull(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// LeafDER is the DER of the certificate's leaf, the first block of its
// stored chain; nil when the chain holds no PEM block.
func (c Certificate) LeafDER() []byte {
	if b, _ := pem.Decode([]byte(c.ChainPEM)); b != nil {
		return b.Bytes
	}
	return nil
}

// CertificateWithLeaf is the certificate among cs whose stored leaf is
// der, byte for byte: of the certificates CertificatesBySerial answers
// (one serial, several issuing CAs), the one a caller holding the
// certificate means.
func CertificateWithLeaf(cs []Certificate, der []byte) (Certificate, bool) {
	for _, c := range cs {
		if leaf := c.LeafDER(); leaf != nil && bytes.Equal(leaf, der) {
			return c, true
		}
	}
	return Certificate{}, false
}

// CertificatesBySerial reads every certificate of a profile with the
// given serial (lower-case hex, without leading zero bytes), oldest
// first; ErrNotFound when there is none. A serial is unique per issuing
// CA only (RFC 5280 §4.1.2.2): the CAs behind a script or a relay, which
// this server does not run, may each have issued it — two CAs counting
// from 01, one created again with its serial file reset — so the caller
// picks among them by what it holds: the certificate's own bytes, a
// certID's key identifier.
func (db *DB) CertificatesBySerial(ctx context.Context, profile, serial string) ([]Certificate, error) {
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT `+certCols+` FROM certificates WHERE serial = ? AND profile = ?
		ORDER BY created_at, id`), serial, profile)
	if err != nil {
		return nil, fmt.Errorf("store: reading certificates with serial %s: %w", serial, err)
	}
	defer rows.Close()
	var out []Certificate
	for rows.Next() {
		c, err := scanCertificate(rows)
		if err != nil {
			return nil, fmt.Errorf("store: reading certificates with serial %s: %w", serial, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: reading certificates with serial %s: %w", serial, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: certificate with serial %s", ErrNotFound, serial)
	}
	return out, nil
}

// compromisedKeyQuery finds a certificate of a key revoked for
// keyCompromise, through the partial index certificates_compromised_key,
// which holds those certificates only. The reason is written as the
// index's predicate (1: keyCompromise), for the planners to match it.
const compromisedKeyQuery = `SELECT 1 FROM certificates WHERE revocation_reason = 1 AND public_key = ? LIMIT 1`

// KeyRevokedForCompromise reports whether a certificate of any profile
// that certifies one of keys (SubjectPublicKeyInfo DER, as stored at
// issuance) is revoked with reason keyCompromise: such a key is not
// certified again (CA/Browser Forum Baseline Requirements §6.1.1.3). A
// key stays known for good: the retention sweep keeps a certificate
// revoked for keyCompromise (PruneRetention).
func (db *DB) KeyRevokedForCompromise(ctx context.Context, keys ...[]byte) (bool, error) {
	for _, k := range keys {
		var one int
		err := db.r.QueryRowContext(ctx, db.q(compromisedKeyQuery), k).Scan(&one)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, fmt.Errorf("store: looking up a key revoked for keyCompromise: %w", err)
		}
	}
	return false, nil
}

// CertificateOfOrder reads the certificate issued for an order, whatever
// its profile.
func (db *DB) CertificateOfOrder(ctx context.Context, orderID string) (Certificate, error) {
	c, err := scanCertificate(db.r.QueryRowContext(ctx, db.q(`SELECT `+certCols+` FROM certificates WHERE order_id = ?`), orderID))
	return c, readErr(err, "certificate of order "+orderID)
}

// RevokeCertificate records a revocation in one transaction: the
// certificate's revocation stamp (a guarded write: only a certificate not
// yet revoked is stamped), the ledger row, and the audit row ev. Of
// concurrent revocations of one certificate exactly one is recorded; the
// others get ErrWrongState and change nothing.
//
// The guarded update of the certificate comes first: of concurrent
// revocations one stamps it, the others wait for its row and then find it
// revoked.
func (db *DB) RevokeCertificate(ctx context.Context, rev Revocation, ev AuditEvent) (Revocation, error) {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q(`UPDATE certificates SET revoked_at = ?, revocation_reason = ?
			WHERE id = ? AND revoked_at IS NULL`), rev.RevokedAt.UnixMilli(), intOrNull(rev.Reason), rev.CertificateID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("%w: certificate %s is already revoked or does not exist", ErrWrongState, rev.CertificateID)
		}
		if err := tx.QueryRowContext(ctx, db.q(`INSERT INTO revocations
			(certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind, actor_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
			rev.CertificateID, rev.Profile, rev.OrderID, rev.Serial, strOrNull(rev.IssuerKeyID), intOrNull(rev.Reason),
			rev.RevokedAt.UnixMilli(), rev.NotAfter.UnixMilli(), rev.ActorKind, rev.ActorID).Scan(&rev.ID); err != nil {
			return err
		}
		if db.revocationRow != nil {
			db.revocationRow(rev.CertificateID)
		}
		return db.insertAudit(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, ErrWrongState) {
		err = fmt.Errorf("store: revoking certificate %s: %w", rev.CertificateID, err)
	}
	return rev, err
}

// RevocationOf reads the ledger row of a certificate.
func (db *DB) RevocationOf(ctx context.Context, certificateID string) (Revocation, error) {
	var (
		r          Revocation
		issuer     sql.NullString
		reason     sql.NullInt64
		at, expiry int64
	)
	err := db.r.QueryRowContext(ctx, db.q(`SELECT id, certificate_id, profile, order_id, serial, issuer_key_id, reason,
		revoked_at, not_after, actor_kind, actor_id FROM revocations WHERE certificate_id = ?`), certificateID).
		Scan(&r.ID, &r.CertificateID, &r.Profile, &r.OrderID, &r.Serial, &issuer, &reason, &at, &expiry, &r.ActorKind, &r.ActorID)
	if err := readErr(err, "revocation of certificate "+certificateID); err != nil {
		return Revocation{}, err
	}
	r.IssuerKeyID, r.Reason, r.RevokedAt, r.NotAfter = issuer.String, nullInt(reason), ms(at), ms(expiry)
	return r, nil
}

// HoldsAuthorizations reports whether an account of a profile holds a
// valid, unexpired authorization for every one of idents (a wildcard
// "*.name" by a wildcard authorization of name): RFC 8555 §7.6 counts such
// an account among those that may revoke a certificate for idents.
func (db *DB) HoldsAuthorizations(ctx context.Context, profile, accountID string, idents []acme.Identifier, now time.Time) (bool, error) {
	if len(idents) == 0 {
		return false, nil
	}
	for _, id := range idents {
		value, wildcard := id.Value, 0
		if rest, ok := strings.CutPrefix(value, "*."); ok {
			value, wildcard = rest, 1
		}
		var held bool
		err := db.r.QueryRowContext(ctx, db.q(`SELECT EXISTS (SELECT 1 FROM authorizations a JOIN orders o ON o.id = a.order_id
			WHERE o.profile = ? AND a.account_id = ? AND a.status = 'valid' AND a.expires_at > ?
			AND a.identifier_type = ? AND a.identifier_value = ? AND a.wildcard = ?)`),
			profile, accountID, now.UnixMilli(), id.Type, value, wildcard).Scan(&held)
		if err != nil {
			return false, fmt.Errorf("store: authorizations of account %s: %w", accountID, err)
		}
		if !held {
			return false, nil
		}
	}
	return true, nil
}

// ChangeRevocationReason changes the recorded reason of a revoked
// certificate to reason, in one transaction with its audit row ev: the
// certificate's stamp and its ledger row (a guarded write: only a revoked
// certificate whose reason differs is changed, so of concurrent changes
// one is recorded and the others get ErrWrongState), and the issuer's
// latest CRL is marked stale so that the refresh republishes it even if
// the regeneration queued after this commit is lost.
//
// The guarded update of the certificate comes first, locking its row for
// the ledger's update.
func (db *DB) ChangeRevocationReason(ctx context.Context, certificateID string, reason int, ev AuditEvent) error {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q(`UPDATE certificates SET revocation_reason = ?
			WHERE id = ? AND revoked_at IS NOT NULL AND (revocation_reason IS NULL OR revocation_reason <> ?)`),
			reason, certificateID, reason)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("%w: certificate %s is not revoked with another reason", ErrWrongState, certificateID)
		}
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE revocations SET reason = ? WHERE certificate_id = ?`),
			reason, certificateID); err != nil {
			return err
		}
		// A mark no ledger row reaches, and another at each change, so
		// that a CRL built meanwhile sees it changed (storeCRL).
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE crls SET ledger_seq = CASE WHEN ledger_seq > 0 THEN 0 ELSE ledger_seq - 1 END WHERE issuer_key_id =
			(SELECT issuer_key_id FROM revocations WHERE certificate_id = ?)`), certificateID); err != nil {
			return err
		}
		return db.insertAudit(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, ErrWrongState) {
		err = fmt.Errorf("store: changing the revocation reason of certificate %s: %w", certificateID, err)
	}
	return err
}
