package store

import (
	"context"
	"fmt"
	"time"
)

// CountUsedNonces counts the nonces the store remembers as used (the
// nonce store's size, for metrics).
func (db *DB) CountUsedNonces(ctx context.Context) (int64, error) {
	var n int64
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM used_nonces`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: counting used nonces: %w", err)
	}
	return n, nil
}

// CRLNextUpdate is when the published CRL of one issuer says the next one
// is due.
type CRLNextUpdate struct {
	IssuerKeyID string
	NextUpdate  time.Time
}

// CRLNextUpdates lists the nextUpdate of every published CRL.
func (db *DB) CRLNextUpdates(ctx context.Context) ([]CRLNextUpdate, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT issuer_key_id, next_update FROM crls ORDER BY issuer_key_id`)
	if err != nil {
		return nil, fmt.Errorf("store: reading CRL next updates: %w", err)
	}
	defer rows.Close()
	var out []CRLNextUpdate
	for rows.Next() {
		var (
			c  CRLNextUpdate
			at int64
		)
		if err := rows.Scan(&c.IssuerKeyID, &at); err != nil {
			return nil, fmt.Errorf("store: reading CRL next updates: %w", err)
		}
		c.NextUpdate = ms(at)
		out = append(out, c)
	}
	return out, rows.Err()
}
