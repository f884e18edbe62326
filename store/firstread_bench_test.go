package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"
)

// BenchmarkASignedReadsStoreWork is a signed POST-as-GET's store work —
// its nonce spent with its account read, then its authorization read —
// with the read made apart (as a request that names no FirstRead) and
// named first (sent with the spend), eight requests at once, per dialect:
// ns/op, and the CPU per request of this process (the store's side, and
// all of SQLite) and of PostgreSQL's backends.
//
//	go test -run '^$' -bench ASignedReadsStoreWork -benchtime 20000x ./store/
func BenchmarkASignedReadsStoreWork(b *testing.B) {
	for _, d := range testDialects {
		b.Run("db="+d.name, func(b *testing.B) {
			db := d.open(b)
			defer db.Close()
			ctx := context.Background()
			scene := newFirstReadScene(b, db)
			acct, authzID := scene.acct, scene.o.order.AuthzIDs[0]
			for _, first := range []bool{false, true} {
				b.Run(fmt.Sprintf("first-read=%v", first), func(b *testing.B) {
					pg0, _ := pgtest.ServerCPU()
					cpu0 := proccpu.Used()
					b.SetParallelism(4)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							ctx := ctx
							if first {
								ctx = WithFirstRead(ctx, FirstReadOfAuthz(authzID))
							}
							if _, fresh, err := db.UseNonceAs(ctx, NewID(), t0.Add(time.Hour), "p", acct.ID); err != nil || !fresh {
								b.Errorf("UseNonceAs: fresh=%v err=%v", fresh, err)
								return
							}
							if _, err := db.GetAuthz(ctx, "p", authzID); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.StopTimer()
					b.ReportMetric(float64(proccpu.Used()-cpu0)/float64(b.N), "cpu-ns/op")
					if d.name == "postgres" {
						pg1, err := pgtest.ServerCPU()
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(pg1-pg0)/float64(b.N), "pg-cpu-ns/op")
					}
				})
			}
		})
	}
}
