package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// BenchmarkIssuedOrderWrites writes issued orders — an order, its
// identifier, authorization, three challenges and certificate, as
// issuance leaves them — eight to a write, as a group commit of eight
// clients stores them, into a SQLite database already holding a few or
// many orders (ACMEPROXY_BENCH_ORDERS, default 50,000), and reports the
// pages each order adds to the WAL (the checkpoint turned off so that
// the WAL keeps them): the pages its rows landed on. It does not depend
// on the machine's load, as issuance rates do.
//
//	go test -run '^$' -bench IssuedOrderWrites -benchtime 200x ./store/
func BenchmarkIssuedOrderWrites(b *testing.B) {
	many := 50000
	if v := os.Getenv("ACMEPROXY_BENCH_ORDERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("ACMEPROXY_BENCH_ORDERS=%q: %v", v, err)
		}
		many = n
	}
	for _, size := range []int{2000, many} {
		b.Run(fmt.Sprintf("orders=%d", size), func(b *testing.B) {
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "t.db")
			db, err := OpenSQLite(ctx, path, SQLiteOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			accounts := make([]Account, 0, size/10+1)
			for i := range cap(accounts) {
				accounts = append(accounts, Account{ID: NewID(), Profile: "p", Thumbprint: fmt.Sprintf("t%d", i), KeyJWK: []byte(`{}`)})
			}
			if err := db.SeedAccounts(ctx, accounts, time.Now()); err != nil {
				b.Fatal(err)
			}
			issued := func(n int) []SeededOrder {
				out := make([]SeededOrder, n)
				for i := range out {
					serial := make([]byte, 16)
					_, _ = rand.Read(serial)
					name := hex.EncodeToString(serial[:6]) + ".example.com"
					out[i] = SeededOrder{Profile: "p", AccountID: accounts[int(serial[7])*len(accounts)/256].ID,
						Identifiers: []acme.Identifier{{Type: acme.IdentifierDNS, Value: name}},
						Challenges:  []string{acme.ChallengeHTTP01, acme.ChallengeDNS01, acme.ChallengeTLSALPN01}, Created: time.Now(),
						Certificate: Certificate{Serial: hex.EncodeToString(serial), ChainPEM: string(make([]byte, 1800)), PublicKey: []byte{1},
							NotBefore: time.Now(), NotAfter: time.Now().Add(24 * time.Hour)}}
				}
				return out
			}
			for done := 0; done < size; done += 5000 {
				if _, err := db.SeedIssued(ctx, issued(min(5000, size-done))); err != nil {
					b.Fatal(err)
				}
			}
			w := rawW(db)
			if _, err := w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
				b.Fatal(err)
			}
			if _, err := w.Exec(`PRAGMA wal_autocheckpoint = 0`); err != nil {
				b.Fatal(err)
			}
			const perWrite = 8
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				orders := issued(perWrite)
				b.StartTimer()
				if _, err := db.SeedIssued(ctx, orders); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st, err := os.Stat(path + "-wal")
			if err != nil {
				b.Fatal(err)
			}
			const walHeader, frame = 32, 24 + 4096
			b.ReportMetric(float64(st.Size()-walHeader)/frame/float64(perWrite*b.N), "WAL-pages/order")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(perWrite*b.N), "ns/order")
		})
	}
}
