package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SignerPublication is what an instance that signs for a profile
// publishes for the instances that serve the profile without its signer
// (a front end): enough to answer ca.pem, the CRLs and revocations the way
// the signing instance would.
type SignerPublication struct {
	Profile string
	// Signer is the signer's module name ("local_ca", "relay", "script").
	Signer string
	// Revocation is where a revocation is recorded: "ledger" (the
	// front end records it, the signing instance publishes the CRL) or
	// "job" (a signer_revoke job for the signing instance).
	Revocation string
	// CAChainPEM is the issuing CA chain, issuing CA first; "" when the
	// signer knows none.
	CAChainPEM string
	// CurrentIssuer is the key id of the CA that issues now, "" when the
	// signer publishes no CRL.
	CurrentIssuer string
	// Issuers are the CAs whose CRL is still published.
	Issuers   []PublishedIssuer
	UpdatedAt time.Time
}

// PublishedIssuer describes one issuing CA whose CRL is published.
type PublishedIssuer struct {
	KeyID    string    `json:"key_id"`
	NameID   string    `json:"name_id"`
	Subject  string    `json:"subject"`
	NotAfter time.Time `json:"not_after"`
}

// Revocation routes a SignerPublication names.
const (
	RevocationLedger = "ledger"
	RevocationJob    = "job"
)

// PublishSigner stores what a signing instance publishes for its profile,
// replacing what was published before.
//
// One upsert, the last publication winning.
func (db *DB) PublishSigner(ctx context.Context, p SignerPublication) error {
	if p.Profile == "" || p.Signer == "" || (p.Revocation != RevocationLedger && p.Revocation != RevocationJob) {
		return fmt.Errorf("store: a signer publication needs a profile, a signer and a revocation route, got %q %q %q",
			p.Profile, p.Signer, p.Revocation)
	}
	issuers := p.Issuers
	if issuers == nil {
		issuers = []PublishedIssuer{}
	}
	js, err := json.Marshal(issuers)
	if err != nil {
		return fmt.Errorf("store: encoding the issuers of profile %s: %w", p.Profile, err)
	}
	_, err = db.wr.ExecContext(ctx, db.q(`INSERT INTO signer_publications
			(profile, signer, revocation, ca_chain, current_issuer, issuers, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (profile) DO UPDATE SET signer = excluded.signer, revocation = excluded.revocation,
			ca_chain = excluded.ca_chain, current_issuer = excluded.current_issuer,
			issuers = excluded.issuers, updated_at = excluded.updated_at`),
		p.Profile, p.Signer, p.Revocation, p.CAChainPEM, p.CurrentIssuer, string(js), p.UpdatedAt.UnixMilli())
	if err != nil {
		return fmt.Errorf("store: publishing the signer of profile %s: %w", p.Profile, err)
	}
	return nil
}

// SignerPublished reads what was published for profile; ErrNotFound when
// no instance that signs for it has published yet.
func (db *DB) SignerPublished(ctx context.Context, profile string) (SignerPublication, error) {
	var (
		p       SignerPublication
		issuers string
		updated int64
	)
	err := db.r.QueryRowContext(ctx, db.q(`SELECT profile, signer, revocation, ca_chain, current_issuer, issuers, updated_at
		FROM signer_publications WHERE profile = ?`), profile).
		Scan(&p.Profile, &p.Signer, &p.Revocation, &p.CAChainPEM, &p.CurrentIssuer, &issuers, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return SignerPublication{}, fmt.Errorf("%w: no signer has published for profile %s", ErrNotFound, profile)
	}
	if err != nil {
		return SignerPublication{}, fmt.Errorf("store: reading the signer publication of profile %s: %w", profile, err)
	}
	if err := json.Unmarshal([]byte(issuers), &p.Issuers); err != nil {
		return SignerPublication{}, fmt.Errorf("store: decoding the issuers of profile %s: %w", profile, err)
	}
	p.UpdatedAt = ms(updated)
	return p, nil
}
