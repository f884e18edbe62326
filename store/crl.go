package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// CRL is the latest CRL of one issuing CA, as published.
type CRL struct {
	IssuerKeyID string
	Number      int64 // cRLNumber
	ThisUpdate  time.Time
	NextUpdate  time.Time
	// LedgerSeq is the last revocation ledger row the CRL took into
	// account.
	LedgerSeq int64
	Entries   int
	DER       []byte
	UpdatedAt time.Time
}

// CRLEntry is a revoked, unexpired certificate a CRL lists.
type CRLEntry struct {
	Serial    string // lower-case hex
	RevokedAt time.Time
	Reason    *int
}

// CRLBuild signs a CRL numbered number listing entries, and returns its
// DER, thisUpdate and nextUpdate.
type CRLBuild func(number int64, entries []CRLEntry) (der []byte, thisUpdate, nextUpdate time.Time, err error)

const crlCols = `issuer_key_id, number, this_update, next_update, ledger_seq, entries, der, updated_at`

func scanCRL(r rowScanner) (CRL, error) {
	var (
		c                     CRL
		this, next, updatedAt int64
	)
	if err := r.Scan(&c.IssuerKeyID, &c.Number, &this, &next, &c.LedgerSeq, &c.Entries, &c.DER, &updatedAt); err != nil {
		return CRL{}, err
	}
	c.ThisUpdate, c.NextUpdate, c.UpdatedAt = ms(this), ms(next), ms(updatedAt)
	return c, nil
}

// GetCRL reads the latest CRL of an issuer.
func (db *DB) GetCRL(ctx context.Context, issuerKeyID string) (CRL, error) {
	c, err := scanCRL(db.r.QueryRowContext(ctx, db.q(`SELECT `+crlCols+` FROM crls WHERE issuer_key_id = ?`), issuerKeyID))
	return c, readErr(err, "CRL of issuer "+issuerKeyID)
}

// PublishCRL builds and stores a new CRL for an issuer in one transaction:
// it reads the issuer's unexpired ledger entries (a certificate past its
// notAfter at now is dropped), takes the next cRLNumber, has build sign
// the CRL, and stores it as the issuer's latest.
//
// The issuer is its key (issuerKeyID: the ledger and the CRL are per key)
// and its name (issuerName: RFC 5280 §5.2.3 wants cRLNumber to increase
// for a CRL issuer, which verifiers know by name, so a CA renewed with a
// new key under its old name must not start again at 1). The number is one
// above both the name's and the key's counters — the key's counter
// carries a sequence begun before names were counted — and both are set to
// it, committed with the CRL that carries it, so cRLNumber strictly
// increases per name across restarts, keys and instances.
func (db *DB) PublishCRL(ctx context.Context, issuerKeyID, issuerName string, now time.Time, build CRLBuild) (CRL, error) {
	if issuerKeyID == "" || issuerName == "" {
		return CRL{}, errors.New("store: publishing a CRL needs an issuer's key id and name")
	}
	var out CRL
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		var seq sql.NullInt64
		if err := tx.QueryRowContext(ctx, db.q(`SELECT MAX(id) FROM revocations WHERE issuer_key_id = ?`), issuerKeyID).
			Scan(&seq); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, db.q(`SELECT serial, revoked_at, reason FROM revocations
			WHERE issuer_key_id = ? AND not_after >= ? ORDER BY id`), issuerKeyID, now.UnixMilli())
		if err != nil {
			return err
		}
		var entries []CRLEntry
		for rows.Next() {
			var (
				e      CRLEntry
				at     int64
				reason sql.NullInt64
			)
			if err := rows.Scan(&e.Serial, &at, &reason); err != nil {
				rows.Close()
				return err
			}
			e.RevokedAt, e.Reason = ms(at), nullInt(reason)
			entries = append(entries, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var keyLast, number int64
		if err := tx.QueryRowContext(ctx, db.q(`SELECT COALESCE(MAX(last), 0) FROM crl_numbers WHERE issuer_key_id = ?`),
			issuerKeyID).Scan(&keyLast); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, db.q(`INSERT INTO crl_name_numbers (issuer_name, last) VALUES (?, ?)
			ON CONFLICT (issuer_name) DO UPDATE SET last = CASE WHEN crl_name_numbers.last >= excluded.last
				THEN crl_name_numbers.last + 1 ELSE excluded.last END
			RETURNING last`), issuerName, keyLast+1).Scan(&number); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO crl_numbers (issuer_key_id, last) VALUES (?, ?)
			ON CONFLICT (issuer_key_id) DO UPDATE SET last = excluded.last`), issuerKeyID, number); err != nil {
			return err
		}
		der, this, next, err := build(number, entries)
		if err != nil {
			return buildError{err}
		}
		out = CRL{IssuerKeyID: issuerKeyID, Number: number, ThisUpdate: this, NextUpdate: next,
			LedgerSeq: seq.Int64, Entries: len(entries), DER: der, UpdatedAt: now}
		_, err = tx.ExecContext(ctx, db.q(`INSERT INTO crls (`+crlCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (issuer_key_id) DO UPDATE SET number = excluded.number, this_update = excluded.this_update,
				next_update = excluded.next_update, ledger_seq = excluded.ledger_seq, entries = excluded.entries,
				der = excluded.der, updated_at = excluded.updated_at
			WHERE excluded.number > crls.number`),
			issuerKeyID, number, this.UnixMilli(), next.UnixMilli(), out.LedgerSeq, out.Entries, der, now.UnixMilli())
		return err
	})
	if be, ok := errors.AsType[buildError](err); ok {
		return CRL{}, be.err
	}
	if err != nil {
		return CRL{}, fmt.Errorf("store: publishing the CRL of issuer %s: %w", issuerKeyID, err)
	}
	return out, nil
}

// buildError carries a failure of the caller's build function out of the
// transaction, to be returned as is.
type buildError struct{ err error }

func (e buildError) Error() string { return e.err.Error() }
func (e buildError) Unwrap() error { return e.err }

// StaleCRLIssuers lists the issuers whose ledger has revocations their
// latest CRL does not reflect (or that have no CRL at all): what a crash
// between a revocation and its CRL regeneration leaves behind.
func (db *DB) StaleCRLIssuers(ctx context.Context) ([]string, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT r.issuer_key_id FROM revocations r
		LEFT JOIN crls c ON c.issuer_key_id = r.issuer_key_id
		WHERE r.issuer_key_id IS NOT NULL
		GROUP BY r.issuer_key_id
		HAVING MAX(r.id) > COALESCE(MAX(c.ledger_seq), 0)`)
	if err != nil {
		return nil, fmt.Errorf("store: stale CRLs: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: stale CRLs: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
