package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// SeededOrder is an order as a finished issuance leaves it: valid, each
// identifier's authorization valid through its first challenge type (the
// others left pending), and its certificate stored.
type SeededOrder struct {
	Profile     string
	AccountID   string
	Identifiers []acme.Identifier
	// Challenges are the challenge types each authorization offered;
	// the first is the one that validated.
	Challenges []string
	Created    time.Time
	// Certificate is the issued certificate: Serial, ChainPEM, PublicKey,
	// NotBefore and NotAfter are stored as given.
	Certificate Certificate
}

// SeedIssued writes issued orders — orders, order_identifiers,
// authorizations, challenges, certificates: the rows issuance writes, in
// the same shape — in one write with prepared statements, and returns the
// orders with their ids and certificate ids. It is how the benchmarks fill
// a database with a realistic history quickly (bench/seed) and how tests
// get many issued certificates; no request path uses it, and it writes no
// audit rows.
//
// It writes new rows only.
func (db *DB) SeedIssued(ctx context.Context, orders []SeededOrder) ([]Order, error) {
	var out []Order
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		out = out[:0] // the write may run again
		prep := func(stmt string) (*sql.Stmt, error) { return tx.PrepareContext(ctx, db.q(stmt)) }
		insOrder, err := prep(`INSERT INTO orders
			(id, profile, account_id, status, identifiers, expires_at, csr, certificate_id, created_at, updated_at)
			VALUES (?, ?, ?, 'valid', ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insOrder.Close()
		insIdent, err := prep(`INSERT INTO order_identifiers (order_id, position, type, value) VALUES (?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insIdent.Close()
		insAuthz, err := prep(`INSERT INTO authorizations
			(id, order_id, position, account_id, identifier_type, identifier_value, wildcard, status, expires_at, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, 0, 'valid', ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insAuthz.Close()
		insChall, err := prep(`INSERT INTO challenges (id, authz_id, position, type, token, status, validated_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insChall.Close()
		insCert, err := prep(`INSERT INTO certificates
			(id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insCert.Close()
		for _, s := range orders {
			idents, err := json.Marshal(s.Identifiers)
			if err != nil {
				return err
			}
			o := Order{ID: NewID(), Profile: s.Profile, AccountID: s.AccountID, Status: acme.StatusValid,
				Identifiers: s.Identifiers, Expires: s.Created.Add(7 * 24 * time.Hour), CreatedAt: s.Created, CertificateID: NewID()}
			at := s.Created.UnixMilli()
			if _, err := insOrder.ExecContext(ctx, o.ID, o.Profile, o.AccountID, string(idents), o.Expires.UnixMilli(),
				[]byte{0x30}, o.CertificateID, at, at+1); err != nil {
				return err
			}
			for i, id := range s.Identifiers {
				if _, err := insIdent.ExecContext(ctx, o.ID, i, id.Type, id.Value); err != nil {
					return err
				}
				aid := NewID()
				o.AuthzIDs = append(o.AuthzIDs, aid)
				if _, err := insAuthz.ExecContext(ctx, aid, o.ID, i, o.AccountID, id.Type, id.Value, at+30*24*3600*1000, at, at+1); err != nil {
					return err
				}
				for j, typ := range s.Challenges {
					status, validated := "pending", sql.NullInt64{}
					if j == 0 {
						status, validated = "valid", sql.NullInt64{Int64: at + 1, Valid: true}
					}
					if _, err := insChall.ExecContext(ctx, NewID(), aid, j, typ, NewID()+NewID(), status, validated, at+1); err != nil {
						return err
					}
				}
			}
			c := s.Certificate
			if _, err := insCert.ExecContext(ctx, o.CertificateID, o.ID, o.Profile, o.AccountID, c.Serial, c.ChainPEM, c.PublicKey,
				c.NotBefore.UnixMilli(), c.NotAfter.UnixMilli(), at+1); err != nil {
				return err
			}
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: seeding %d orders: %w", len(orders), err)
	}
	return out, nil
}

// SeedAccounts writes valid accounts (ID, Profile, Thumbprint, KeyJWK,
// Contact as given) in one write, as SeedIssued writes orders.
//
// It writes new rows only.
func (db *DB) SeedAccounts(ctx context.Context, accounts []Account, now time.Time) error {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, db.q(`INSERT INTO accounts
			(id, profile, key_thumbprint, key_jwk, status, contact, tos_agreed, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'valid', ?, 1, ?, ?)`))
		if err != nil {
			return err
		}
		defer st.Close()
		for _, a := range accounts {
			contact, err := json.Marshal(nonNil(a.Contact))
			if err != nil {
				return err
			}
			if _, err := st.ExecContext(ctx, a.ID, a.Profile, a.Thumbprint, string(a.KeyJWK), string(contact),
				now.UnixMilli(), now.UnixMilli()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: seeding %d accounts: %w", len(accounts), err)
	}
	return nil
}

// SeedRevocations records revocations of seeded certificates — the
// certificate's stamp and the ledger row, as RevokeCertificate writes
// them, without audit rows — in one write.
//
// Its stamps are guarded as RevokeCertificate's.
func (db *DB) SeedRevocations(ctx context.Context, revs []Revocation) error {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		stamp, err := tx.PrepareContext(ctx, db.q(`UPDATE certificates SET revoked_at = ?, revocation_reason = ?
			WHERE id = ? AND revoked_at IS NULL`))
		if err != nil {
			return err
		}
		defer stamp.Close()
		ledger, err := tx.PrepareContext(ctx, db.q(`INSERT INTO revocations
			(certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind, actor_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`))
		if err != nil {
			return err
		}
		defer ledger.Close()
		for _, r := range revs {
			if _, err := stamp.ExecContext(ctx, r.RevokedAt.UnixMilli(), intOrNull(r.Reason), r.CertificateID); err != nil {
				return err
			}
			if _, err := ledger.ExecContext(ctx, r.CertificateID, r.Profile, r.OrderID, r.Serial, strOrNull(r.IssuerKeyID),
				intOrNull(r.Reason), r.RevokedAt.UnixMilli(), r.NotAfter.UnixMilli(), r.ActorKind, r.ActorID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: seeding %d revocations: %w", len(revs), err)
	}
	return nil
}
