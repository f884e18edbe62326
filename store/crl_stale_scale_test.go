package store

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// seedLedger writes n ledger rows without certificates: the first five
// under "old-ca" (a CA retired since), the rest under "ca" and
// "other-ca" (one row in ten), with the foreign key to the
// certificates off for the one connection that writes them: a ledger of
// a size no test could revoke its way to, written in one statement.
func seedLedger(tb testing.TB, db *DB, n int) {
	tb.Helper()
	ctx := context.Background()
	conn, err := rawW(db).w.Conn(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	off, on := `PRAGMA foreign_keys = OFF`, `PRAGMA foreign_keys = ON`
	if db.dialect.name() != "sqlite" {
		off, on = `SET session_replication_role = replica`, `SET session_replication_role = DEFAULT`
	}
	notAfter := t0.Add(48 * time.Hour).UnixMilli()
	for _, s := range []string{off,
		fmt.Sprintf(`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %d)
			INSERT INTO revocations (certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind)
			SELECT 'seeded-' || i, 'p', 'o' || i, 's' || i, CASE WHEN i <= 5 THEN 'old-ca' WHEN i %% 10 = 0 THEN 'other-ca' ELSE 'ca' END, 4, i, %d, 'admin' FROM g`, n, notAfter),
		on} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			tb.Fatal(err)
		}
	}
}

// publishEach stores a CRL of every issuer seedLedger writes to, each
// listing the whole ledger of its issuer as it stands.
func publishEach(tb testing.TB, db *DB, at time.Time) {
	tb.Helper()
	for _, issuer := range []string{"old-ca", "ca", "other-ca"} {
		if _, err := db.PublishCRLFrom(context.Background(), issuer, "CN="+issuer, at, at, nil, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
			return []byte{byte(r.Number)}, at, at.Add(24 * time.Hour), nil
		}); err != nil {
			tb.Fatal(err)
		}
	}
}

// StaleCRLIssuers runs once a minute on every instance, whatever the
// ledger holds: with 20,000 revocations under three CAs, one of them
// retired with the ledger's first rows, it must read a few ledger rows
// for each CA — the rows its CRL's read did not see, by the CA's rows
// in id order (SQLite) or their transactions (PostgreSQL) — not every
// row of the ledger, which a mass revocation grows to
// hundreds of thousands. SQLite's plan may not scan the ledger; on
// PostgreSQL, with the ledger analyzed, the rows its plan reads from the
// ledger are counted.
func TestTheStaleCRLCheckReadsAFewLedgerRowsPerCAWhateverTheLedgersSize(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		seedLedger(t, db, 20_000)
		publishEach(t, db, t0.Add(time.Minute))
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
			t.Fatalf("with every CA's ledger on its CRL, StaleCRLIssuers = %v, %v; want none", stale, err)
		}
		if _, err := revoke(t, db, issuedCert(t, db, "0a", t0.Add(48*time.Hour)), "other-ca", 4); err != nil {
			t.Fatal(err)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || !slices.Equal(stale, []string{"other-ca"}) {
			t.Fatalf("after a revocation under other-ca, StaleCRLIssuers = %v, %v; want [other-ca]", stale, err)
		}

		if db.dialect.name() == "sqlite" {
			plan, _, err := QueryPlan(ctx, db, db.staleCRLQuery())
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if regexp.MustCompile(`(?m)^SCAN (revocations|r)\b`).MatchString(text) || !strings.Contains(text, "SEARCH r USING COVERING INDEX revocations_ledger (issuer_key_id=? AND id>?)") {
				t.Errorf("the check scans the ledger rather than reading each CA's rows above its CRL's ledger_seq by revocations_ledger:\n%s", text)
			}
			return
		}
		if err := db.Analyze(ctx); err != nil {
			t.Fatal(err)
		}
		conn, err := db.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		plan := strings.Join(pgPlan(t, ctx, conn, "EXPLAIN (ANALYZE, TIMING OFF) "+db.staleCRLQuery()), "\n")
		// Rows read: those a scan of the ledger returned and those it
		// read and dropped by a filter, over all its loops (EXPLAIN
		// gives both per loop).
		read := 0.0
		node := regexp.MustCompile(`^\s*(?:->\s*)?(\S.*?)\s+\(.*actual rows=(\d+(?:\.\d+)?) loops=(\d+)\)`)
		removed := regexp.MustCompile(`^\s*Rows Removed by (?:Filter|Index Recheck): (\d+)`)
		ledger, loops := false, 0.0
		for _, line := range strings.Split(plan, "\n") {
			if m := node.FindStringSubmatch(line); m != nil {
				ledger = strings.Contains(m[1], "on revocations")
				rowsPer, _ := strconv.ParseFloat(m[2], 64)
				loops, _ = strconv.ParseFloat(m[3], 64)
				if ledger {
					read += rowsPer * loops
				}
			} else if m := removed.FindStringSubmatch(line); m != nil && ledger {
				n, _ := strconv.ParseFloat(m[1], 64)
				read += n * loops
			}
		}
		if read > 20 {
			t.Errorf("the check read %.0f ledger rows of 20,001 under three CAs; want a few for each of the three CAs:\n%s", read, plan)
		}
		if !strings.Contains(plan, "on revocations") {
			t.Errorf("no read of the ledger in the plan:\n%s", plan)
		}
	})
}

// BenchmarkTheStaleCRLCheckWith100000Revocations times StaleCRLIssuers,
// which every instance runs once a minute, over a ledger of 100,000
// revocations under three CAs whose CRLs list them all.
//
//	go test -run '^$' -bench TheStaleCRLCheckWith100000 ./store/
func BenchmarkTheStaleCRLCheckWith100000Revocations(b *testing.B) {
	for _, d := range testDialects {
		b.Run(d.name, func(b *testing.B) {
			ctx := context.Background()
			db := d.open(b)
			defer db.Close()
			seedLedger(b, db, 100_000)
			publishEach(b, db, t0.Add(time.Minute))
			if err := db.Analyze(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
					b.Fatalf("StaleCRLIssuers = %v, %v; want none", stale, err)
				}
			}
		})
	}
}
