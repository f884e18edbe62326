package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"
)

// BenchmarkIssueOrderSpend measures what duplicate_certificates' spend
// adds to an issuance's write (IssueOrder of a processing order: the
// order to valid, its certificate, its audit row), on SQLite
// (synchronous=FULL, as the app opens it) and on PostgreSQL
// (internal/pgtest's server): with no spend (the limit off), with the
// spend of a bucket no certificate has spent yet (a new row, as for an
// identifier set's first certificate of a period), and with the spend of
// one bucket again and again (an existing row; over its burst the spend
// is dropped). cpu-ns/op is the process's CPU per issuance.
//
//	go test -run '^$' -bench IssueOrderSpend -benchtime 300x ./store/
func BenchmarkIssueOrderSpend(b *testing.B) {
	for _, where := range []string{"sqlite", "postgres"} {
		for _, spend := range []string{"none", "new-bucket", "same-bucket"} {
			b.Run(where+"/spend="+spend, func(b *testing.B) {
				ctx := context.Background()
				var (
					db  *DB
					err error
				)
				if where == "sqlite" {
					db, err = OpenSQLite(ctx, filepath.Join(b.TempDir(), "b.db"), SQLiteOptions{})
				} else {
					db, err = OpenPostgres(ctx, pgtest.DSN(b), PostgresOptions{})
				}
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				now := time.Now()
				acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, now)
				if err != nil {
					b.Fatal(err)
				}
				orders := make([]Order, b.N)
				for i := range orders {
					id := acme.Identifier{Type: "dns", Value: fmt.Sprintf("n%d.bench.example.com", i)}
					o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Expires: now.Add(time.Hour)},
						[]Authz{{Identifier: id, Expires: now.Add(time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, now)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := rawW(db).Exec(`UPDATE orders SET status = 'ready' WHERE id = ?`, o.ID); err != nil {
						b.Fatal(err)
					}
					if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), OrderClient{}, "", now); err != nil || !won {
						b.Fatalf("claim: %v %v", won, err)
					}
					orders[i] = o
				}
				chain := strings.Repeat("-", 1800) // a chain's size of PEM
				b.ReportAllocs()
				b.ResetTimer()
				cpu := proccpu.Used()
				for i, o := range orders {
					var spends []LimitSpend
					switch spend {
					case "new-bucket":
						spends = []LimitSpend{{Key: fmt.Sprintf("duplicate_certificates/p/%s/%032x", acct.ID, i), Emission: 24 * time.Hour / 300, Burst: 300, Cost: 1}}
					case "same-bucket":
						spends = []LimitSpend{{Key: "duplicate_certificates/p/" + acct.ID + "/same", Emission: 24 * time.Hour / 300, Burst: 300, Cost: 1}}
					}
					ev := AuditEvent{At: now, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID, AccountID: acct.ID}
					if _, err := db.IssueOrder(ctx, Certificate{OrderID: o.ID, Profile: "p", AccountID: acct.ID, Serial: NewID(), ChainPEM: chain,
						PublicKey: []byte{1}, NotBefore: now, NotAfter: now.Add(24 * time.Hour)}, ev, now, spends...); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
