package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// What the relay signers of every instance on one database share: the
// upstream http-01 challenges they are answering (so the instance the
// upstream reaches answers, whichever placed the order) and the upstream
// accounts (so an instance continues an upstream order another placed).

// RelayHTTPToken is an upstream http-01 challenge being answered: the
// upstream fetches http://<Identifier>/.well-known/acme-challenge/<Token>
// and expects KeyAuth.
type RelayHTTPToken struct {
	Token      string
	Identifier string
	KeyAuth    string
	Expires    time.Time
}

// PutRelayHTTPToken publishes t, replacing a row for the same token, and
// drops rows past their expiry (those a crash left between Present and
// CleanUp).
//
// Its statements are a delete of expired rows and an upsert; neither
// decides from a read.
func (db *DB) PutRelayHTTPToken(ctx context.Context, t RelayHTTPToken, now time.Time) error {
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`DELETE FROM relay_http_tokens WHERE expires_at <= ?`), now.UnixMilli()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, db.q(`INSERT INTO relay_http_tokens (token, identifier, key_auth, expires_at)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (token) DO UPDATE SET identifier = excluded.identifier, key_auth = excluded.key_auth,
				expires_at = excluded.expires_at`),
			t.Token, t.Identifier, t.KeyAuth, t.Expires.UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("store: publishing an http-01 token for %s: %w", t.Identifier, err)
	}
	return nil
}

// GetRelayHTTPToken reads the challenge of token; ErrNotFound when there
// is none or it has expired.
func (db *DB) GetRelayHTTPToken(ctx context.Context, token string, now time.Time) (RelayHTTPToken, error) {
	t := RelayHTTPToken{Token: token}
	var exp int64
	err := db.r.QueryRowContext(ctx, db.q(`SELECT identifier, key_auth, expires_at FROM relay_http_tokens
		WHERE token = ? AND expires_at > ?`), token, now.UnixMilli()).Scan(&t.Identifier, &t.KeyAuth, &exp)
	if err := readErr(err, "http-01 token"); err != nil {
		return RelayHTTPToken{}, err
	}
	t.Expires = ms(exp)
	return t, nil
}

// DeleteRelayHTTPToken withdraws the challenge of token; withdrawing one
// that is gone is not an error.
//
// One statement.
func (db *DB) DeleteRelayHTTPToken(ctx context.Context, token string) error {
	if _, err := db.wr.ExecContext(ctx, db.q(`DELETE FROM relay_http_tokens WHERE token = ?`), token); err != nil {
		return fmt.Errorf("store: withdrawing an http-01 token: %w", db.unavailable(err))
	}
	return nil
}

// RelayAccount is a profile's account at one upstream.
type RelayAccount struct {
	// Upstream names the upstream CA (certmagic's issuer key of its
	// directory URL).
	Upstream string
	Profile  string
	// KeyPEM is the account's private key, PKCS#8 PEM.
	KeyPEM string
	// Location is the account's URL at the upstream; "" until registered.
	Location string
	Contact  []string
}

// CreateRelayAccount stores a, unless the upstream and profile have an
// account already, and returns the account stored after the call: a, or
// the earlier one, which the caller must use instead (so that instances
// creating one at once all end up with one key).
//
// At READ COMMITTED: the insert waits for a concurrent one and then does
// nothing, and the read after it sees the account that won.
func (db *DB) CreateRelayAccount(ctx context.Context, a RelayAccount, now time.Time) (RelayAccount, error) {
	contact, err := json.Marshal(nonNil(a.Contact))
	if err != nil {
		return RelayAccount{}, err
	}
	var got RelayAccount
	err = db.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO relay_accounts
			(upstream, profile, key_pem, location, contact, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`),
			a.Upstream, a.Profile, a.KeyPEM, a.Location, string(contact), now.UnixMilli(), now.UnixMilli()); err != nil {
			return err
		}
		got, err = scanRelayAccount(tx.QueryRowContext(ctx, db.q(relayAccountSelect), a.Upstream, a.Profile))
		return err
	})
	if err != nil {
		return RelayAccount{}, fmt.Errorf("store: storing the relay account of profile %s: %w", a.Profile, err)
	}
	return got, nil
}

// GetRelayAccount reads the account of a profile at an upstream;
// ErrNotFound when there is none.
func (db *DB) GetRelayAccount(ctx context.Context, upstream, profile string) (RelayAccount, error) {
	a, err := scanRelayAccount(db.r.QueryRowContext(ctx, db.q(relayAccountSelect), upstream, profile))
	return a, readErr(err, "relay account of profile "+profile)
}

// SetRelayAccountRegistration records where the upstream registered the
// account ("" forgets the registration, keeping the key).
//
// One statement, the last registration winning.
func (db *DB) SetRelayAccountRegistration(ctx context.Context, upstream, profile, location string, contact []string, now time.Time) error {
	raw, err := json.Marshal(nonNil(contact))
	if err != nil {
		return err
	}
	res, err := db.wr.ExecContext(ctx, db.q(`UPDATE relay_accounts SET location = ?, contact = ?, updated_at = ?
		WHERE upstream = ? AND profile = ?`), location, string(raw), now.UnixMilli(), upstream, profile)
	if err != nil {
		return fmt.Errorf("store: recording the relay account of profile %s: %w", profile, db.unavailable(err))
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("%w: relay account of profile %s", ErrNotFound, profile)
	}
	return nil
}

const relayAccountSelect = `SELECT upstream, profile, key_pem, location, contact FROM relay_accounts
	WHERE upstream = ? AND profile = ?`

func scanRelayAccount(row rowScanner) (RelayAccount, error) {
	var (
		a       RelayAccount
		contact string
	)
	if err := row.Scan(&a.Upstream, &a.Profile, &a.KeyPEM, &a.Location, &contact); err != nil {
		return RelayAccount{}, err
	}
	if err := json.Unmarshal([]byte(contact), &a.Contact); err != nil {
		return RelayAccount{}, fmt.Errorf("relay account of profile %s contact: %w", a.Profile, err)
	}
	return a, nil
}
