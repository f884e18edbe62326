package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// OrderSummary is an order as operators list it: the order, why it failed
// (the operator's detail) and the certificate issued for it, if any.
type OrderSummary struct {
	Order
	FailureDetail string
	UpdatedAt     time.Time
	Certificate   *Certificate // nil until issued
	// AccountEABLabel is the label of the external account binding the
	// order's account was created with; "" without one.
	AccountEABLabel string
}

// OrderFilter selects orders for operators. Zero fields do not filter.
type OrderFilter struct {
	Profile    string
	Status     acme.Status
	AccountID  string
	Identifier string    // an identifier value, exactly as stored (normalized)
	Serial     string    // a certificate serial, lower-case hex as stored
	Since      time.Time // created at or after
	After      string    // page: orders listed after this order id
	Limit      int       // default 100, at most 1000
}

const orderSummaryCols = `o.id, o.profile, o.account_id, o.status, o.identifiers, o.not_before, o.not_after, o.expires_at,
	o.error, o.csr, o.certificate_id, o.created_at, o.client_addr, o.user_agent, o.failure_detail, o.updated_at,
	c.id, c.serial, c.chain_pem, c.not_before, c.not_after, c.revoked_at, c.revocation_reason, oa.eab_label, o.replaces, c.issuer_key_id`

const orderSummaryFrom = ` FROM orders o LEFT JOIN certificates c ON c.order_id = o.id LEFT JOIN accounts oa ON oa.id = o.account_id`

func scanOrderSummary(r rowScanner, withChain bool) (OrderSummary, error) {
	var (
		s                OrderSummary
		idents           string
		nb, na           sql.NullInt64
		expires, created int64
		updated          int64
		problem, certID  sql.NullString
		failed           sql.NullString
		cID, cSerial     sql.NullString
		cChain           sql.NullString
		cNB, cNA         sql.NullInt64
		cRevoked, cWhy   sql.NullInt64
		eabLabel         sql.NullString
		cIssuer          sql.NullString
	)
	if err := r.Scan(&s.ID, &s.Profile, &s.AccountID, &s.Status, &idents, &nb, &na, &expires, &problem, &s.CSR, &certID,
		&created, &s.Client.Addr, &s.Client.UserAgent, &failed, &updated, &cID, &cSerial, &cChain, &cNB, &cNA, &cRevoked, &cWhy, &eabLabel, &s.Replaces, &cIssuer); err != nil {
		return OrderSummary{}, err
	}
	o := &s.Order
	if err := json.Unmarshal([]byte(idents), &o.Identifiers); err != nil {
		return OrderSummary{}, fmt.Errorf("order %s identifiers: %w", o.ID, err)
	}
	o.NotBefore, o.NotAfter, o.Expires, o.CreatedAt = nullMs(nb), nullMs(na), ms(expires), ms(created)
	if problem.Valid {
		o.Error = []byte(problem.String)
	}
	o.CertificateID = certID.String
	s.FailureDetail, s.UpdatedAt, s.AccountEABLabel = failed.String, ms(updated), eabLabel.String
	if cID.Valid {
		c := &Certificate{ID: cID.String, OrderID: o.ID, Profile: o.Profile, AccountID: o.AccountID, Serial: cSerial.String,
			NotBefore: nullMs(cNB), NotAfter: nullMs(cNA), RevokedAt: nullMs(cRevoked), Reason: nullInt(cWhy), IssuerKeyID: cIssuer.String}
		if withChain {
			c.ChainPEM = cChain.String
		}
		s.Certificate = c
	}
	return s, nil
}

// ListOrders returns orders newest first.
//
// Each filter is written so that the index made for it (migration
// order_search) is used and the page is read in order, not sorted from
// every match: by identifier or serial the few orders found through their
// own index; otherwise an index on (…, created_at, id) read backwards from
// the page's start. The other filters then narrow what those give: after
// an identifier or a serial they compare "column || ”", which keeps
// SQLite's planner, which has no statistics, from preferring the index of
// the profile, status or account (every order of it) to the identifier's.
func (db *DB) ListOrders(ctx context.Context, f OrderFilter) ([]OrderSummary, error) {
	if !allHoldable(f.Profile, string(f.Status), f.AccountID, f.Identifier, f.Serial, f.After) {
		return nil, nil
	}
	stmt, args := listOrdersQuery(f)
	rows, err := db.r.QueryContext(ctx, db.q(stmt), args...)
	if err != nil {
		return nil, fmt.Errorf("store: listing orders: %w", err)
	}
	defer rows.Close()
	var out []OrderSummary
	for rows.Next() {
		s, err := scanOrderSummary(rows, false)
		if err != nil {
			return nil, fmt.Errorf("store: listing orders: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// listOrdersQuery is ListOrders' statement for f, and its arguments.
func listOrdersQuery(f OrderFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) { where, args = append(where, cond), append(args, v) }
	selective := f.Identifier != "" || f.Serial != ""
	if f.Identifier != "" {
		add("o.id IN (SELECT i.order_id FROM order_identifiers i WHERE i.value = ?)", f.Identifier)
	}
	if f.Serial != "" {
		add("o.id IN (SELECT s.order_id FROM certificates s WHERE s.serial = ?)", f.Serial)
	}
	// col is a column to compare; after a selective filter, as an
	// expression no index serves.
	col := func(c string) string {
		if selective {
			return c + " || ''"
		}
		return c
	}
	if f.Profile != "" {
		add(col("o.profile")+" = ?", f.Profile)
	}
	if f.Status != "" {
		add(col("o.status")+" = ?", f.Status)
	}
	if f.AccountID != "" {
		add(col("o.account_id")+" = ?", f.AccountID)
	}
	if !f.Since.IsZero() {
		// A number: after a selective filter, as an expression too.
		created := "o.created_at"
		if selective {
			created += " + 0"
		}
		add(created+" >= ?", f.Since.UnixMilli())
	}
	if f.After != "" {
		// A row value, so that the page starts with a seek in the index
		// rather than a test of every row; no rows when the order named
		// does not exist.
		add("(o.created_at, o.id) < (SELECT p.created_at, p.id FROM orders p WHERE p.id = ?)", f.After)
	}
	stmt := `SELECT ` + orderSummaryCols + orderSummaryFrom
	if len(where) > 0 {
		stmt += ` WHERE ` + strings.Join(where, " AND ")
	}
	stmt += ` ORDER BY o.created_at DESC, o.id DESC LIMIT ?`
	return stmt, append(args, PageLimit(f.Limit))
}

// OrderByID reads an order of any profile with its certificate chain.
func (db *DB) OrderByID(ctx context.Context, id string) (OrderSummary, error) {
	if !holdable(id) {
		return OrderSummary{}, fmt.Errorf("%w: order %q", ErrNotFound, id)
	}
	s, err := scanOrderSummary(db.r.QueryRowContext(ctx, db.q(`SELECT `+orderSummaryCols+orderSummaryFrom+` WHERE o.id = ?`), id), true)
	return s, readErr(err, "order "+id)
}

// AccountFilter selects accounts for operators. Zero fields do not filter.
type AccountFilter struct {
	Profile string
	Status  acme.Status
	After   string // page: accounts listed after this account id
	Limit   int    // default 100, at most 1000
}

// AccountSummary is an account with the number of its orders.
type AccountSummary struct {
	Account
	Orders int
}

// ListAccounts returns accounts newest first.
func (db *DB) ListAccounts(ctx context.Context, f AccountFilter) ([]AccountSummary, error) {
	if !allHoldable(f.Profile, string(f.Status), f.After) {
		return nil, nil
	}
	var (
		where []string
		args  []any
	)
	if f.Profile != "" {
		where, args = append(where, "a.profile = ?"), append(args, f.Profile)
	}
	if f.Status != "" {
		where, args = append(where, "a.status = ?"), append(args, f.Status)
	}
	if f.After != "" {
		where = append(where, "EXISTS (SELECT 1 FROM accounts p WHERE p.id = ? AND (a.created_at < p.created_at OR (a.created_at = p.created_at AND a.id < p.id)))")
		args = append(args, f.After)
	}
	stmt := `SELECT a.id, a.profile, a.key_thumbprint, a.key_jwk, a.status, a.contact, a.tos_agreed, a.created_at, a.eab_kid, a.eab_label,
		(SELECT COUNT(*) FROM orders o WHERE o.account_id = a.id) FROM accounts a`
	if len(where) > 0 {
		stmt += ` WHERE ` + strings.Join(where, " AND ")
	}
	stmt += ` ORDER BY a.created_at DESC, a.id DESC LIMIT ?`
	rows, err := db.r.QueryContext(ctx, db.q(stmt), append(args, PageLimit(f.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("store: listing accounts: %w", err)
	}
	defer rows.Close()
	var out []AccountSummary
	for rows.Next() {
		var s AccountSummary
		if s.Account, err = scanAccount(countingScanner{rows, &s.Orders}); err != nil {
			return nil, fmt.Errorf("store: listing accounts: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// AccountByID reads an account of any profile, with its number of orders.
func (db *DB) AccountByID(ctx context.Context, id string) (AccountSummary, error) {
	if !holdable(id) {
		return AccountSummary{}, fmt.Errorf("%w: account %q", ErrNotFound, id)
	}
	var s AccountSummary
	var err error
	s.Account, err = scanAccount(countingScanner{db.r.QueryRowContext(ctx, db.q(`SELECT a.id, a.profile, a.key_thumbprint,
		a.key_jwk, a.status, a.contact, a.tos_agreed, a.created_at, a.eab_kid, a.eab_label,
		(SELECT COUNT(*) FROM orders o WHERE o.account_id = a.id) FROM accounts a WHERE a.id = ?`), id), &s.Orders})
	return s, readErr(err, "account "+id)
}

// countingScanner scans an account row followed by one more column.
type countingScanner struct {
	r     rowScanner
	extra *int
}

func (c countingScanner) Scan(dest ...any) error { return c.r.Scan(append(dest, c.extra)...) }
