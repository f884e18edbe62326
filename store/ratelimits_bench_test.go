package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSpendLimits measures one new-order's spend with the default
// limits on SQLite: two buckets spent (the account's orders, the
// identifier set's duplicates) and one checked (the identifier's failed
// validations), in one lazy write.
func BenchmarkSpendLimits(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			db, err := OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "b.db"), SQLiteOptions{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				spends := []LimitSpend{
					{Key: "orders_per_account/bench/acct", Emission: time.Microsecond, Burst: 1 << 40, Cost: 1},
					{Key: fmt.Sprintf("duplicate_certificates/bench/acct/%d", i), Emission: time.Minute, Burst: 300, Cost: 1},
					{Key: fmt.Sprintf("failed_validations/bench/acct/dns:n%d", i), Emission: time.Minute, Burst: 60, Cost: 1, CheckOnly: true},
				}
				if _, ok, err := db.SpendLimits(ctx, spends, now); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
