package store

import (
	"context"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// BenchmarkOrderSpend measures what the default limits add to a new
// order's write on SQLite, below the authority: CreateOrder of a one-name
// order with three challenges and no spend (every limit off), and with the
// spends the authority passes for it by default — the account's pending
// authorizations cap, a unit of its orders, and a check of the identifier
// set's duplicate certificates and of the identifier's failed validations.
// Accounts take 500 orders each, so a bound reaches half the default cap.
// cpu-ns/op is the process's CPU per order, which other processes on the
// machine move less than ns/op.
//
//	go test -run '^$' -bench OrderSpend -benchtime 3000x ./store/
func BenchmarkOrderSpend(b *testing.B) {
	for _, limits := range []string{"off", "default"} {
		b.Run("limits="+limits, func(b *testing.B) {
			ctx := context.Background()
			db, err := OpenSQLite(ctx, filepath.Join(b.TempDir(), "b.db"), SQLiteOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			now := time.Now()
			var acct string
			b.ReportAllocs()
			b.ResetTimer()
			cpu := proccpu.Used()
			for i := 0; i < b.N; i++ {
				if i%500 == 0 {
					b.StopTimer()
					a, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, now)
					if err != nil {
						b.Fatal(err)
					}
					acct = a.ID
					b.StartTimer()
				}
				id := acme.Identifier{Type: "dns", Value: fmt.Sprintf("n%d.bench.example.com", i)}
				authz := Authz{Identifier: id, Expires: now.Add(time.Hour), Challenges: []Challenge{
					{Type: "http-01", Token: NewID()}, {Type: "dns-01", Token: NewID()}, {Type: "tls-alpn-01", Token: NewID()}}}
				var spends []LimitSpend
				if limits == "default" {
					spends = []LimitSpend{
						{Key: pendingBoundKey("p", acct), Burst: 1000, Cost: 1, PendingAuthzs: true},
						{Key: "orders_per_account/p/" + acct, Emission: time.Hour / 1000, Burst: 1000, Cost: 1},
						{Key: "failed_validations/p/" + acct + "/dns:" + id.Value, Emission: time.Hour / 60, Burst: 60, Cost: 1, CheckOnly: true},
						{Key: fmt.Sprintf("duplicate_certificates/p/%s/%032x", acct, i), Emission: 24 * time.Hour / 300, Burst: 300, Cost: 1, CheckOnly: true},
					}
				}
				o := Order{Profile: "p", AccountID: acct, Identifiers: []acme.Identifier{id}, Expires: now.Add(time.Hour)}
				if _, err := db.CreateOrder(ctx, o, []Authz{authz}, now, spends...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
