package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// Relay order statuses (relay_orders.status).
const (
	RelayProcessing = "processing"
	RelayValid      = "valid"
	RelayInvalid    = "invalid"
)

// RelayOrder is the relay signer's mapping from a local order to the work
// upstream, read together with what a restarted process needs from the
// local order itself.
type RelayOrder struct {
	OrderID string
	Profile string
	// UpstreamOrderURL is the upstream order's Location; "" until the
	// upstream order exists.
	UpstreamOrderURL string
	// CSR is the client's CSR, DER, relayed byte for byte.
	CSR []byte
	// ClientAddr and UserAgent describe the client that finalized.
	ClientAddr string
	UserAgent  string
	Status     string // processing, valid, invalid
	// Detail is the operator-facing reason of a failed relay.
	Detail    string
	CreatedAt time.Time
	UpdatedAt time.Time

	// From the local order.
	OrderStatus   acme.Status
	Identifiers   []acme.Identifier
	NotBefore     time.Time // zero: not requested
	NotAfter      time.Time
	Expires       time.Time
	FailureDetail string // orders.failure_detail
	// CertificateProfile is the certificate profile the order chose; ""
	// for none.
	CertificateProfile string
	// Replaces is the certID (RFC 9773 §4.1) of the certificate the order
	// replaces (orders.replaces); "" for none.
	Replaces string
}

// NewRelayOrder is the mapping the relay signer stores at finalize. Its
// ClientAddr and UserAgent are stored clipped to AuditFieldMax: they end up
// in the order's audit row.
type NewRelayOrder struct {
	OrderID    string
	Profile    string
	CSR        []byte
	ClientAddr string
	UserAgent  string
	// UpstreamOrderURL, if set, is an upstream order already placed for
	// the local order (prepared while its client proved its names); the
	// relay carries on with it instead of placing one.
	UpstreamOrderURL string
}

const relayCols = `r.order_id, r.profile, r.upstream_order_url, r.csr, r.client_addr, r.user_agent, r.status, r.detail,
	r.created_at, r.updated_at, o.status, o.identifiers, o.not_before, o.not_after, o.expires_at, o.failure_detail,
	o.certificate_profile, o.replaces`

const relayFrom = ` FROM relay_orders r JOIN orders o ON o.id = r.order_id`

func scanRelayOrder(row rowScanner) (RelayOrder, error) {
	var (
		r                RelayOrder
		upstream, failed sql.NullString
		idents           string
		created, updated int64
		nb, na           sql.NullInt64
		expires          int64
	)
	if err := row.Scan(&r.OrderID, &r.Profile, &upstream, &r.CSR, &r.ClientAddr, &r.UserAgent, &r.Status, &r.Detail,
		&created, &updated, &r.OrderStatus, &idents, &nb, &na, &expires, &failed, &r.CertificateProfile, &r.Replaces); err != nil {
		return RelayOrder{}, err
	}
	if err := json.Unmarshal([]byte(idents), &r.Identifiers); err != nil {
		return RelayOrder{}, fmt.Errorf("order %s identifiers: %w", r.OrderID, err)
	}
	r.UpstreamOrderURL, r.FailureDetail = upstream.String, failed.String
	r.CreatedAt, r.UpdatedAt = ms(created), ms(updated)
	r.NotBefore, r.NotAfter, r.Expires = nullMs(nb), nullMs(na), ms(expires)
	return r, nil
}

// CreateRelayOrder stores the mapping of a local order, or returns the one
// already stored for it (created=false): a repeated finalize of an order
// resumed after a crash maps it once.
//
// At READ COMMITTED: the insert waits for a concurrent one of the order
// and then does nothing, and the read after it sees the mapping that won.
//
// It is a lazy write (see engine), like the order's claim before it: the
// caller makes it durable before anything relies on it surviving a power
// loss — before the upstream order it names is finalized, and before the
// finalize answers (the relay's first durable write, the certificate's,
// or its job's). A power loss before then takes it together with the
// claim, and the order is ready again.
func (db *DB) CreateRelayOrder(ctx context.Context, n NewRelayOrder, now time.Time) (RelayOrder, bool, error) {
	var (
		r       RelayOrder
		created bool
	)
	err := db.withLazyTx(ctx, func(tx *sql.Tx) error {
		created = false // fn may run again (see engine)
		res, err := tx.ExecContext(ctx, db.q(`INSERT INTO relay_orders
			(order_id, profile, upstream_order_url, csr, client_addr, user_agent, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, 'processing', ?, ?)
			ON CONFLICT DO NOTHING`),
			n.OrderID, n.Profile, sql.NullString{String: n.UpstreamOrderURL, Valid: n.UpstreamOrderURL != ""}, n.CSR, Clip(text(n.ClientAddr), AuditFieldMax), Clip(text(n.UserAgent), AuditFieldMax), now.UnixMilli(), now.UnixMilli())
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err == nil && k == 1 {
			created = true
		}
		r, err = scanRelayOrder(tx.QueryRowContext(ctx, db.q(`SELECT `+relayCols+relayFrom+` WHERE r.order_id = ?`), n.OrderID))
		return err
	})
	if err != nil {
		return RelayOrder{}, false, fmt.Errorf("store: mapping relay order %s: %w", n.OrderID, err)
	}
	return r, created, nil
}

// GetRelayOrder reads the mapping of a local order.
func (db *DB) GetRelayOrder(ctx context.Context, orderID string) (RelayOrder, error) {
	r, err := scanRelayOrder(db.r.QueryRowContext(ctx, db.q(`SELECT `+relayCols+relayFrom+` WHERE r.order_id = ?`), orderID))
	return r, readErr(err, "relay order "+orderID)
}

// SetRelayUpstreamOrder records the upstream order of a relay, unless one
// is recorded already. It returns the URL recorded after the call: url,
// or the earlier one, which the caller must then use instead.
//
// The update is guarded on no URL yet, re-checked on the newest row; the
// read after it sees the URL that won.
func (db *DB) SetRelayUpstreamOrder(ctx context.Context, orderID, url string, now time.Time) (string, error) {
	var got sql.NullString
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE relay_orders SET upstream_order_url = ?, updated_at = ?
			WHERE order_id = ? AND upstream_order_url IS NULL`), url, now.UnixMilli(), orderID); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, db.q(`SELECT upstream_order_url FROM relay_orders WHERE order_id = ?`), orderID).Scan(&got)
	})
	if err := readErr(err, "relay order "+orderID); err != nil {
		return "", err
	}
	return got.String, nil
}

// ReplaceRelayUpstreamOrder records url as the upstream order of a relay
// in place of old, unless another is recorded by then. It returns the URL
// recorded after the call: url, or the one that replaced old first, which
// the caller must then use instead. The relay replaces a prepared
// upstream order that can no longer be finalized (expired, invalid).
//
// The update is guarded on old, re-checked on the newest row; the read
// after it sees the URL that won.
func (db *DB) ReplaceRelayUpstreamOrder(ctx context.Context, orderID, old, url string, now time.Time) (string, error) {
	var got sql.NullString
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE relay_orders SET upstream_order_url = ?, updated_at = ?
			WHERE order_id = ? AND upstream_order_url = ?`), url, now.UnixMilli(), orderID, old); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, db.q(`SELECT upstream_order_url FROM relay_orders WHERE order_id = ?`), orderID).Scan(&got)
	})
	if err := readErr(err, "relay order "+orderID); err != nil {
		return "", err
	}
	return got.String, nil
}

// SettleRelayOrder moves a processing relay to valid or invalid, keeping
// detail for the operator. A relay already settled is left as it is. It
// is a lazy write (see engine): it follows the local order's own settling
// write, which is durable, and a mapping left processing beside a settled
// order is never resumed (ProcessingRelayOrders).
//
// One guarded statement.
func (db *DB) SettleRelayOrder(ctx context.Context, orderID, status, detail string, now time.Time) error {
	if status != RelayValid && status != RelayInvalid {
		return fmt.Errorf("store: cannot settle relay order %s as %q", orderID, status)
	}
	if _, err := db.lazyWr.ExecContext(ctx, db.q(`UPDATE relay_orders SET status = ?, detail = ?, updated_at = ?
		WHERE order_id = ? AND status = 'processing'`), status, failureText(detail), now.UnixMilli(), orderID); err != nil {
		return fmt.Errorf("store: settling relay order %s: %w", orderID, err)
	}
	return nil
}

// ProcessingRelayOrders lists the relays of a profile still in flight:
// the mapping and the local order both processing. A starting process
// re-queues their jobs.
func (db *DB) ProcessingRelayOrders(ctx context.Context, profile string) ([]RelayOrder, error) {
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT `+relayCols+relayFrom+`
		WHERE r.profile = ? AND r.status = 'processing' AND o.status = 'processing' ORDER BY r.created_at`), profile)
	if err != nil {
		return nil, fmt.Errorf("store: relays in flight: %w", err)
	}
	defer rows.Close()
	var out []RelayOrder
	for rows.Next() {
		r, err := scanRelayOrder(rows)
		if err != nil {
			return nil, fmt.Errorf("store: relays in flight: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: relays in flight: %w", err)
	}
	return out, nil
}
