package store

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// On a new PostgreSQL database, whose tables have no statistics yet, the
// plan a connection keeps for each statement a certificate's flow runs by
// a row's key reaches that row by its key: a connection keeps its generic
// plan until the table's first ANALYZE, and a plan made on empty tables
// that reaches the row through an index led by another of its columns
// (the profile, the status) reads every row sharing that value — a
// profile's every order on each read, more with every order stored. Each
// case's plan may use only the tables' keys and the indexes that lead from
// a row's key to its children.
func TestStatementsByKeyReachTheirRowByKeyOnANewPostgresDatabase(t *testing.T) {
	ctx := context.Background()
	db, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A few rows of every kind, as a benchmark's first seconds have.
	for i := 0; i < 3; i++ {
		newOrderWithAuthzs(t, db, 2)
	}
	keys := map[string]bool{
		"accounts_pkey": true, "orders_pkey": true, "authorizations_pkey": true, "challenges_pkey": true,
		"certificates_pkey": true, "used_nonces_pkey": true,
		"authorizations_order":         true, // an order's authorizations, by the order's key
		"challenges_authz":             true, // an authorization's challenges, by its key
		"revocations_tx":               true, // an issuer's ledger rows written since a snapshot
		"certificates_compromised_key": true, // a key revoked for keyCompromise
	}
	_, lateRows := postgresDialect{}.crlLateRows()
	cases := []struct {
		name, stmt string
	}{
		{"a nonce spent with its account read", db.q(postgresDialect{}.spendNonceAs())},
		{"an account read", db.q(accountByID)},
		{"an order read", db.q(getOrderQuery)},
		{"an authorization read", db.q(db.getAuthzQuery())},
		{"a challenge read", db.q(getChallengeQuery)},
		{"a certificate read", db.q(getCertificateQuery)},
		{"a challenge turned valid", pgChallengeSettled},
		{"an order promoted to ready", pgOrderPromoted},
		{"an order claimed for issuance", db.q(claimOrderForIssue)},
		{"an order issued", db.q(postgresDialect{}.issueOrder(1))},
		{"the ledger rows a CRL's base did not see", db.q(lateRows)},
		{"a CSR's key looked up among those revoked for keyCompromise", db.q(compromisedKeyQuery)},
	}
	scan := regexp.MustCompile(`(Seq Scan on \w+|(?:Index|Index Only|Bitmap Index) Scan (?:using|on) \w+)`)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := db.r.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The plan a connection keeps: the generic one, made without
			// the parameters' values.
			if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("by_key_%d", i)
			if _, err := conn.ExecContext(ctx, `PREPARE `+name+` AS `+c.stmt); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(ctx, `DEALLOCATE `+name)
			var params int
			if err := conn.QueryRowContext(ctx, `SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = $1`, name).Scan(&params); err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(pgPlan(t, ctx, conn, `EXPLAIN EXECUTE `+name+nullArgs(params)), "\n")
			found := scan.FindAllStringSubmatch(plan, -1)
			if len(found) == 0 {
				t.Fatalf("no scan in the plan:\n%s", plan)
			}
			for _, m := range found {
				f := strings.Fields(m[1])
				if index := f[len(f)-1]; strings.HasPrefix(m[1], "Seq Scan") || !keys[index] {
					t.Errorf("%s: not by a key:\n%s", m[1], plan)
				}
			}
		})
	}
}

// pgPlan is the text of PostgreSQL's plan for explain (an EXPLAIN
// statement), one line per row, on conn: a prepared statement's generic
// plan is a session's.
func pgPlan(t *testing.T, ctx context.Context, conn *sql.Conn, explain string) []string {
	t.Helper()
	rows, err := conn.QueryContext(ctx, explain)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// nullArgs is an EXECUTE's argument list of n NULLs: a generic plan is
// the same whatever they are.
func nullArgs(n int) string {
	if n == 0 {
		return ""
	}
	return "(" + strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") + ")"
}

// StaleCRLIssuers runs once a minute on every instance. Its look for a
// ledger row that a stored CRL's read did not see — above the CRL's
// ledger_seq or below it — reaches the CA's rows written since that read
// by revocations_tx, not every row of the ledger (the CAs are found by a
// skip through revocations_crl): on a new database (no statistics yet)
// and with 100,000 revocations stored and analyzed.
func TestTheStaleCRLCheckReachesLateLedgerRowsByTheirTransactionOnPostgreSQL(t *testing.T) {
	for _, c := range []struct {
		name    string
		revoked int
	}{
		{"on a new database", 0},
		{"with 100,000 revocations", 100_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := revoke(t, db, issuedCert(t, db, "0a", t0.Add(48*time.Hour)), "ca", 4); err != nil {
				t.Fatal(err)
			}
			if c.revoked > 0 {
				// Ledger rows without certificates (the foreign key's
				// trigger off for this session), spread over two issuers.
				conn, err := rawW(db).w.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range []string{
					`SET session_replication_role = replica`,
					fmt.Sprintf(`INSERT INTO revocations (certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind)
						SELECT 'seeded-' || g, 'p', 'o' || g, to_hex(g), CASE WHEN g %% 10 = 0 THEN 'other-ca' ELSE 'ca' END, 4, g, %d, 'admin'
						FROM generate_series(1, %d) g`, t0.Add(48*time.Hour).UnixMilli(), c.revoked),
					`SET session_replication_role = DEFAULT`,
				} {
					if _, err := conn.ExecContext(ctx, s); err != nil {
						t.Fatal(err)
					}
				}
				conn.Close()
			}
			publishFrom(t, db, t0.Add(time.Minute), nil)
			if c.revoked > 0 {
				if err := db.Analyze(ctx); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := db.r.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			plan := strings.Join(pgPlan(t, ctx, conn, `EXPLAIN `+db.staleCRLQuery()), "\n")
			scan := regexp.MustCompile(`Seq Scan on revocations\b|(?:Index|Index Only) Scan(?: Backward)? using (\w+) on revocations\b|Bitmap Index Scan on (revocations\w*)`)
			found := scan.FindAllStringSubmatch(plan, -1)
			byTx := false
			for _, m := range found {
				switch index := m[1] + m[2]; index {
				case "revocations_tx":
					byTx = true
				case "revocations_crl": // the skip from one CA to the next
				default:
					t.Errorf("%s: neither by revocations_tx nor the skip through revocations_crl:\n%s", m[0], plan)
				}
			}
			if !byTx {
				t.Errorf("the ledger rows are not read by revocations_tx:\n%s", plan)
			}
		})
	}
}
