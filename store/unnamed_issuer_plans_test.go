package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// The renew-early naming of issuers (CertificatesWithoutIssuer) pages
// through the certificates stored without an issuer by an index that
// holds those alone, in id order — no sort, no read of every certificate
// — so that the issuance, which stores every certificate with its issuer,
// keeps no index entry for it (migration certificates_unnamed_issuer). On
// PostgreSQL the plan is the generic one a connection keeps, with
// sequential scans priced out: the index must serve the statement, as it
// would at any size, however small the tables are here.
func TestCertificatesWithoutAnIssuerAreReadThroughAnIndexOfThemAlone(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		conn, err := db.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var plan []string
		if db.dialect.name() == "sqlite" {
			rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+unnamedIssuersSQL, t0.UnixMilli(), "", 500)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, set := range []string{`SET plan_cache_mode = force_generic_plan`, `SET enable_seqscan = off`,
				`PREPARE unnamed AS ` + db.q(unnamedIssuersSQL)} {
				if _, err := conn.ExecContext(ctx, set); err != nil {
					t.Fatal(err)
				}
			}
			plan = pgPlan(t, ctx, conn, fmt.Sprintf(`EXPLAIN EXECUTE unnamed(%d, '', 500)`, t0.UnixMilli()))
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "certificates_unnamed_issuer") || strings.Contains(text, "Sort") || strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("the certificates without an issuer are not read in id order through certificates_unnamed_issuer:\n%s", text)
		}

		// And that index holds only them: its definition's predicate.
		def := `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'certificates_unnamed_issuer'`
		if db.dialect.name() != "sqlite" {
			def = `SELECT indexdef FROM pg_indexes WHERE indexname = 'certificates_unnamed_issuer'`
		}
		var sql string
		if err := db.r.QueryRowContext(ctx, def).Scan(&sql); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(sql, "WHERE") || !strings.Contains(sql, "issuer_key_id = ''") {
			t.Errorf("certificates_unnamed_issuer is not limited to the certificates without an issuer: %s", sql)
		}
	})
}
