package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	if !holdable(token) {
		return RelayHTTPToken{}, fmt.Errorf("%w: http-01 token %q", ErrNotFound, token)
	}
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

// RelayPlacement is the claim on placing the upstream order of a local
// order (relay_placements): Owner places it, unless Until passed, and
// records its URL here once placed; then every instance relays that one.
type RelayPlacement struct {
	OrderID string
	Owner   string
	Until   time.Time
	// UpstreamOrderURL is the upstream order placed; "" while the claim
	// is only a claim.
	UpstreamOrderURL string
}

// Placed reports whether the upstream order is recorded.
func (p RelayPlacement) Placed() bool { return p.UpstreamOrderURL != "" }

// ClaimRelayPlacement claims, for owner until until, placing the upstream
// order of orderID: unless an upstream order is recorded for it, or
// another owner's claim is still live at now (its claimed_until after
// now), which it then leaves as it is. It returns the placement after the
// call and whether owner holds the claim (and must place the order).
//
// One upsert guarded on no URL and a lapsed claim (at READ COMMITTED
// PostgreSQL re-checks the guard on the newest row of a conflict), then a
// read of the row that won. A lazy write (see engine): a claim lost to a
// power loss went with its owner.
func (db *DB) ClaimRelayPlacement(ctx context.Context, orderID, owner string, now, until time.Time) (RelayPlacement, bool, error) {
	var p RelayPlacement
	err := db.withLazyTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO relay_placements (order_id, owner, claimed_until, updated_at)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (order_id) DO UPDATE SET owner = excluded.owner, claimed_until = excluded.claimed_until,
				updated_at = excluded.updated_at
			WHERE relay_placements.upstream_order_url IS NULL AND relay_placements.claimed_until <= ?`),
			orderID, owner, until.UnixMilli(), now.UnixMilli(), now.UnixMilli()); err != nil {
			return err
		}
		var err error
		p, err = scanRelayPlacement(tx.QueryRowContext(ctx, db.q(relayPlacementSelect), orderID))
		return err
	})
	if err != nil {
		return RelayPlacement{}, false, fmt.Errorf("store: claiming the upstream order of relay order %s: %w", orderID, err)
	}
	return p, p.Owner == owner && !p.Placed(), nil
}

// RecordRelayPlacement records url as the upstream order of orderID,
// placed under owner's claim, unless the claim is no longer owner's (it
// lapsed and another took it over) or an order is recorded already. It
// returns the placement after the call: the caller's url is the one
// relayed only when the placement names it. ErrNotFound: no claim at all
// (released, or lost with the database).
//
// A guarded update, then a read of the row. A lazy write (see engine):
// its callers make it durable with the durable write that follows it.
func (db *DB) RecordRelayPlacement(ctx context.Context, orderID, owner, url string, now time.Time) (RelayPlacement, error) {
	var p RelayPlacement
	err := db.withLazyTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE relay_placements SET upstream_order_url = ?, updated_at = ?
			WHERE order_id = ? AND owner = ? AND upstream_order_url IS NULL`), url, now.UnixMilli(), orderID, owner); err != nil {
			return err
		}
		var err error
		p, err = scanRelayPlacement(tx.QueryRowContext(ctx, db.q(relayPlacementSelect), orderID))
		return err
	})
	return p, readErr(err, "recording the upstream order of relay order "+orderID)
}

// ReleaseRelayPlacement gives up owner's claim on placing the upstream
// order of orderID when it placed none (its newOrder failed), so that
// another may place it at once rather than when the claim lapses. A claim
// no longer owner's, or one with an order recorded, is left alone.
//
// One guarded statement, lazy (see engine).
func (db *DB) ReleaseRelayPlacement(ctx context.Context, orderID, owner string) error {
	if _, err := db.lazyWr.ExecContext(ctx, db.q(`DELETE FROM relay_placements
		WHERE order_id = ? AND owner = ? AND upstream_order_url IS NULL`), orderID, owner); err != nil {
		return fmt.Errorf("store: releasing the claim on the upstream order of relay order %s: %w", orderID, db.unavailable(err))
	}
	return nil
}

// GetRelayPlacement reads the placement of orderID's upstream order;
// ErrNotFound when nobody claimed it.
func (db *DB) GetRelayPlacement(ctx context.Context, orderID string) (RelayPlacement, error) {
	p, err := scanRelayPlacement(db.r.QueryRowContext(ctx, db.q(relayPlacementSelect), orderID))
	return p, readErr(err, "upstream order placement of relay order "+orderID)
}

const relayPlacementSelect = `SELECT order_id, owner, claimed_until, upstream_order_url FROM relay_placements WHERE order_id = ?`

func scanRelayPlacement(row rowScanner) (RelayPlacement, error) {
	var (
		p     RelayPlacement
		until int64
		url   sql.NullString
	)
	if err := row.Scan(&p.OrderID, &p.Owner, &until, &url); err != nil {
		return RelayPlacement{}, err
	}
	p.Until, p.UpstreamOrderURL = ms(until), url.String
	return p, nil
}

// A relay cool-down is the time before which an upstream asked a
// profile's account to send nothing more (a 429's Retry-After). It is
// kept in a row of rate_limits beside the buckets, the time as the row's
// tat_ns: a cool-down that is over is the same as no row, as a bucket
// whose TAT has passed is, and PruneLimits deletes it like one. So every
// instance on one database waits out a rate limit one of them was told
// of, rather than each sending the upstream a request to be told again.

// relayCoolDownKey is the rate_limits row of the cool-down of a profile's
// account at an upstream.
func relayCoolDownKey(upstream, profile string) string {
	return "relay_cool_down/" + upstream + "/" + profile
}

// RelayCoolDown is when the cool-down of a profile's account at an
// upstream ends: the zero time when none was recorded (or it was
// pruned); one in the past is over.
func (db *DB) RelayCoolDown(ctx context.Context, upstream, profile string) (time.Time, error) {
	var until int64
	err := db.r.QueryRowContext(ctx, db.q(`SELECT tat_ns FROM rate_limits WHERE key = ?`),
		relayCoolDownKey(upstream, profile)).Scan(&until)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("store: the relay cool-down of profile %s: %w", profile, err)
	}
	return time.Unix(0, until), nil
}

// ExtendRelayCoolDown makes the cool-down of a profile's account at an
// upstream last until until, or longer when it does already.
//
// One upsert keeping the later time. A lazy write (see engine): a
// cool-down lost to a power loss costs one more request answered 429.
func (db *DB) ExtendRelayCoolDown(ctx context.Context, upstream, profile string, until time.Time) error {
	if _, err := db.lazyWr.ExecContext(ctx, db.q(`INSERT INTO rate_limits (key, tat_ns) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET tat_ns = CASE WHEN excluded.tat_ns > rate_limits.tat_ns
			THEN excluded.tat_ns ELSE rate_limits.tat_ns END`),
		relayCoolDownKey(upstream, profile), until.UnixNano()); err != nil {
		return fmt.Errorf("store: recording the relay cool-down of profile %s: %w", profile, db.unavailable(err))
	}
	return nil
}

// LiveOrderNames reports whether an order of profile that is pending,
// ready or processing, and not expired at now, names one of values
// (identifier values as orders name them: "*.example.com" for a
// wildcard). The relay asks before it deactivates an upstream
// authorization that is valid: the upstream may have reused it for the
// upstream order of such an order, which deactivating it would make
// invalid (RFC 8555 §7.1.6).
func (db *DB) LiveOrderNames(ctx context.Context, profile string, values []string, now time.Time) (bool, error) {
	if len(values) == 0 {
		return false, nil
	}
	args := []any{profile, now.UnixMilli()}
	for _, v := range values {
		args = append(args, v)
	}
	var found int
	err := db.r.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM (SELECT 1 FROM order_identifiers i JOIN orders o ON o.id = i.order_id
		WHERE o.profile = ? AND o.status IN ('pending', 'ready', 'processing') AND o.expires_at > ?
			AND i.value IN (`+marks(len(values))+`) LIMIT 1) AS live`), args...).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("store: live orders of profile %s naming %s: %w", profile, strings.Join(values, ", "), err)
	}
	return found > 0, nil
}
