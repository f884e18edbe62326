package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// schemaAt creates at place (newPlace) the running test's dialect's
// schema up to version, inclusive, and no further, as an older binary
// left it, and returns a handle on it outside the store and the
// dialect's rebinding of ? placeholders.
func schemaAt(t *testing.T, place string, version int) (*sql.DB, func(string) string) {
	t.Helper()
	var (
		raw *sql.DB
		err error
		d   dialect
	)
	switch dialectOf(t).name {
	case "sqlite":
		raw, err = sql.Open("sqlite", "file:"+place+"?_pragma=foreign_keys(1)")
		d = sqliteDialect{}
	case "postgres":
		raw, err = sql.Open("pgx", place)
		d = postgresDialect{}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec(createSchemaTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range d.migrations()[:version] {
		for _, stmt := range m.stmts {
			if _, err := raw.Exec(stmt); err != nil {
				t.Fatalf("migration %d: %v", m.version, err)
			}
		}
		if _, err := raw.Exec(d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)`), m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	return raw, d.rebind
}

// dumpRows renders every row stmt selects, in its order, for comparing
// a table before and after a migration.
func dumpRows(t *testing.T, db *sql.DB, stmt string) []string {
	t.Helper()
	rows, err := db.Query(stmt)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = fmt.Sprintf("%x", bs)
			}
			fmt.Fprintf(&b, "%s=%v ", cols[i], v)
		}
		out = append(out, b.String())
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const (
	dumpCertificates = `SELECT id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after, revoked_at,
		revocation_reason, created_at, issuer_key_id, renew_early_at, explanation_url FROM certificates ORDER BY id`
	dumpRevocations = `SELECT id, certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind,
		actor_id, tx FROM revocations ORDER BY id`
)

// A database at migration 28 (serials unique across the store), with
// certificates — one stored before issuers were recorded, one asked to
// renew early, one revoked for keyCompromise — and revocations, one of
// them pruned, upgrades with every row as it was, the indexes of a new
// database, its foreign keys enforced and the revocation ledger's ids
// continuing past the pruned one; then a serial is unique per issuer.
func TestADatabaseWithCertificatesUpgradesToSerialsUniquePerIssuerWithEveryRowIndexAndForeignKey(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		raw, q := schemaAt(t, place, 28)
		exec := func(stmt string, args ...any) error {
			_, err := raw.ExecContext(ctx, q(stmt), args...)
			return err
		}
		must := func(stmt string, args ...any) {
			t.Helper()
			if err := exec(stmt, args...); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		must(`INSERT INTO accounts (id, profile, key_thumbprint, key_jwk, status, created_at, updated_at) VALUES ('acct', 'p', 'th', '{}', 'valid', 0, 0)`)
		for i := 1; i <= 5; i++ {
			must(`INSERT INTO orders (id, profile, account_id, status, identifiers, expires_at, created_at, updated_at)
				VALUES (?, 'p', 'acct', 'valid', '[]', 0, ?, ?)`, fmt.Sprintf("o%d", i), i, i)
		}
		must(`INSERT INTO certificates (id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
				revoked_at, revocation_reason, created_at)
			VALUES ('c1', 'o1', 'p', 'acct', '01', 'chain 1', ?, 10, 1000, 20, 1, 10)`, []byte{1})
		must(`INSERT INTO certificates (id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
				created_at, issuer_key_id, renew_early_at, explanation_url)
			VALUES ('c2', 'o2', 'p', 'acct', '02', 'chain 2', ?, 11, 1001, 11, 'aa', 30, 'https://status.example.com/')`, []byte{2})
		must(`INSERT INTO certificates (id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
				created_at, issuer_key_id)
			VALUES ('c3', 'o3', 'p', 'acct', '03', 'chain 3', ?, 12, 1002, 12, 'bb')`, []byte{3})
		for i, c := range []string{"c1", "c2", "c3"} {
			must(`INSERT INTO revocations (certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind)
				VALUES (?, 'p', ?, ?, 'aa', 1, 20, 1000, 'admin')`, c, fmt.Sprintf("o%d", i+1), fmt.Sprintf("0%d", i+1))
		}
		must(`DELETE FROM revocations WHERE certificate_id = 'c3'`) // pruned: the ledger's ids went up to 3
		certsBefore, revsBefore := dumpRows(t, raw, dumpCertificates), dumpRows(t, raw, dumpRevocations)

		db := openAt(t, place)
		fresh := openTest(t)

		if got := dumpRows(t, raw, dumpCertificates); !slices.Equal(got, certsBefore) {
			t.Errorf("certificates after the upgrade:\n%s\nwant as before:\n%s", strings.Join(got, "\n"), strings.Join(certsBefore, "\n"))
		}
		if got := dumpRows(t, raw, dumpRevocations); !slices.Equal(got, revsBefore) {
			t.Errorf("revocations after the upgrade:\n%s\nwant as before:\n%s", strings.Join(got, "\n"), strings.Join(revsBefore, "\n"))
		}
		if got, want := schemaIndexes(t, db), schemaIndexes(t, fresh); !slices.Equal(got, want) {
			t.Errorf("indexes and triggers after the upgrade:\n%v\nwant a new database's:\n%v", got, want)
		}
		if got, want := schemaColumns(t, db), schemaColumns(t, fresh); !slices.Equal(got, want) {
			t.Errorf("columns after the upgrade:\n%v\nwant a new database's:\n%v", got, want)
		}

		// The ledger references certificates: a revocation of a
		// certificate that is not there is refused, one of a
		// certificate that is is recorded, with the id after the
		// pruned one's; a revoked certificate cannot be deleted.
		if err := exec(`INSERT INTO revocations (certificate_id, profile, order_id, serial, revoked_at, not_after, actor_kind)
			VALUES ('gone', 'p', 'o9', '09', 20, 1000, 'admin')`); err == nil {
			t.Error("a revocation of no certificate was recorded; want the foreign key to refuse it")
		}
		var id int64
		if err := raw.QueryRowContext(ctx, q(`INSERT INTO revocations (certificate_id, profile, order_id, serial, revoked_at, not_after, actor_kind)
			VALUES ('c3', 'p', 'o3', '03', 20, 1000, 'admin') RETURNING id`)).Scan(&id); err != nil {
			t.Errorf("revoking certificate c3 after the upgrade: %v", err)
		} else if id <= 3 {
			t.Errorf("the ledger's next id is %d; want one past the pruned row's 3 (a CRL may have taken it into account)", id)
		}
		if err := exec(`DELETE FROM certificates WHERE id = 'c1'`); err == nil {
			t.Error("a revoked certificate was deleted from under its ledger row; want the foreign key to refuse it")
		}

		// A serial is unique per issuer, no longer across the store.
		if err := exec(`INSERT INTO certificates (id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
				created_at, issuer_key_id)
			VALUES ('c4', 'o4', 'p', 'acct', '03', 'chain 4', ?, 13, 1003, 13, 'cc')`, []byte{4}); err != nil {
			t.Errorf("another issuer's certificate with serial 03: %v; want it stored", err)
		}
		if err := exec(`INSERT INTO certificates (id, order_id, profile, account_id, serial, chain_pem, public_key, not_before, not_after,
				created_at, issuer_key_id)
			VALUES ('c5', 'o5', 'p', 'acct', '03', 'chain 5', ?, 14, 1004, 14, 'bb')`, []byte{5}); err == nil {
			t.Error("two certificates of one issuer with serial 03 were stored; want the second refused")
		}
	})
}
