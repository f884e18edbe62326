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
// the same shape — in one write of multi-row INSERTs (see rowBatch), and
// returns the orders with their ids and certificate ids. It is how the
// benchmarks fill a database with a realistic history quickly
// (bench/seed) and how tests get many issued certificates; no request
// path uses it, and it writes no audit rows.
//
// It writes new rows only.
func (db *DB) SeedIssued(ctx context.Context, orders []SeededOrder) ([]Order, error) {
	var out []Order
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		out = out[:0] // the write may run again
		// Parents before children (foreign keys): each table's rows are
		// written whole before the next table's.
		tables := []*rowBatch{
			newRowBatch(`INSERT INTO orders
				(id, profile, account_id, status, identifiers, expires_at, csr, certificate_id, created_at, updated_at) VALUES `,
				`(?, ?, ?, 'valid', ?, ?, ?, ?, ?, ?)`),
			newRowBatch(`INSERT INTO order_identifiers (order_id, position, type, value) VALUES `, `(?, ?, ?, ?)`),
			newRowBatch(`INSERT INTO authorizations
				(id, order_id, position, account_id, identifier_type, identifier_value, wildcard, status, expires_at, created_at, updated_at) VALUES `,
				`(?, ?, ?, ?, ?, ?, 0, 'valid', ?, ?, ?)`),
			newRowBatch(`INSERT INTO challenges (id, authz_id, position, type, token, status, validated_at, updated_at) VALUES `,
				`(?, ?, ?, ?, ?, ?, ?, ?)`),
			newRowBatch(`INSERT INTO certificates
				(id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, created_at) VALUES `,
				`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		}
		insOrder, insIdent, insAuthz, insChall, insCert := tables[0], tables[1], tables[2], tables[3], tables[4]
		for _, s := range orders {
			idents, err := json.Marshal(s.Identifiers)
			if err != nil {
				return err
			}
			o := Order{ID: NewID(), Profile: s.Profile, AccountID: s.AccountID, Status: acme.StatusValid,
				Identifiers: s.Identifiers, Expires: s.Created.Add(7 * 24 * time.Hour), CreatedAt: s.Created, CertificateID: NewID()}
			at := s.Created.UnixMilli()
			insOrder.add(o.ID, o.Profile, o.AccountID, string(idents), o.Expires.UnixMilli(), []byte{0x30}, o.CertificateID, at, at+1)
			for i, id := range s.Identifiers {
				insIdent.add(o.ID, i, id.Type, id.Value)
				aid := NewID()
				o.AuthzIDs = append(o.AuthzIDs, aid)
				insAuthz.add(aid, o.ID, i, o.AccountID, id.Type, id.Value, at+30*24*3600*1000, at, at+1)
				for j, typ := range s.Challenges {
					status, validated := string(acme.StatusPending), sql.NullInt64{}
					if j == 0 {
						status, validated = string(acme.StatusValid), sql.NullInt64{Int64: at + 1, Valid: true}
					}
					insChall.add(NewID(), aid, j, typ, NewID()+NewID(), status, validated, at+1)
				}
			}
			c := s.Certificate
			insCert.add(o.CertificateID, o.ID, o.Profile, o.AccountID, c.Serial, c.ChainPEM, c.PublicKey,
				c.NotBefore.UnixMilli(), c.NotAfter.UnixMilli(), at+1)
			out = append(out, o)
		}
		for _, t := range tables {
			if err := t.write(ctx, tx, db.q); err != nil {
				return err
			}
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
		rows := newRowBatch(`INSERT INTO accounts
			(id, profile, key_thumbprint, key_jwk, status, contact, tos_agreed, created_at, updated_at) VALUES `,
			`(?, ?, ?, ?, 'valid', ?, 1, ?, ?)`)
		for _, a := range accounts {
			contact, err := json.Marshal(nonNil(a.Contact))
			if err != nil {
				return err
			}
			rows.add(a.ID, a.Profile, a.Thumbprint, string(a.KeyJWK), string(contact), now.UnixMilli(), now.UnixMilli())
		}
		return rows.write(ctx, tx, db.q)
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
		// The stamps as one UPDATE … FROM a list of rows per statement,
		// its columns named as both engines name a VALUES list's; the
		// casts type them for PostgreSQL.
		stamps := newRowBatch(`UPDATE certificates SET revoked_at = v.column2, revocation_reason = v.column3
			FROM (VALUES `, `(?, CAST(? AS BIGINT), CAST(? AS INTEGER))`)
		ledger := newRowBatch(`INSERT INTO revocations
			(certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind, actor_id) VALUES `,
			`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		for _, r := range revs {
			stamps.add(r.CertificateID, r.RevokedAt.UnixMilli(), intOrNull(r.Reason))
			ledger.add(r.CertificateID, r.Profile, r.OrderID, r.Serial, strOrNull(r.IssuerKeyID),
				intOrNull(r.Reason), r.RevokedAt.UnixMilli(), r.NotAfter.UnixMilli(), r.ActorKind, r.ActorID)
		}
		stamps.tail = `) AS v WHERE certificates.id = v.column1 AND certificates.revoked_at IS NULL`
		if err := stamps.write(ctx, tx, db.q); err != nil {
			return err
		}
		return ledger.write(ctx, tx, db.q)
	})
	if err != nil {
		return fmt.Errorf("store: seeding %d revocations: %w", len(revs), err)
	}
	return nil
}
