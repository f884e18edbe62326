package seed

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The seeding tool (go run ./bench/seed) writes what it is asked for,
// across batches: the orders, valid and each with its certificate, their
// accounts, the revocations on the CRL of the issuer named, and a sample
// that the operator's searches by identifier, account and serial find.
func TestSeedingWritesTheHistoryAskedForAndASampleTheSearchesFind(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "seed.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	const orders, revoked, perAccount = 25, 10, 10
	s, err := Run(ctx, db, Options{Profile: "bench", Orders: orders, Revoked: revoked, IssuerKeyID: "abcd",
		OrdersPerAccount: perAccount, Batch: 7, Now: now})
	if err != nil {
		t.Fatal(err)
	}

	all, err := db.ListOrders(ctx, store.OrderFilter{Profile: "bench", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	accounts := map[string]bool{}
	for _, o := range all {
		accounts[o.AccountID] = true
		if o.Status != acme.StatusValid || o.Certificate == nil || !o.Certificate.NotAfter.After(now) {
			t.Errorf("order %s: %s, certificate %+v; want valid with a certificate unexpired at the end of the history", o.ID, o.Status, o.Certificate)
		}
	}
	if len(all) != orders || len(accounts) != (orders+perAccount-1)/perAccount {
		t.Errorf("%d orders of %d accounts; want %d of %d", len(all), len(accounts), orders, (orders+perAccount-1)/perAccount)
	}

	var listed []store.CRLEntry
	if _, err := db.PublishCRL(ctx, "abcd", "seed CA", now, func(_ int64, entries []store.CRLEntry) ([]byte, time.Time, time.Time, error) {
		listed = entries
		return []byte{0x30}, now, now.Add(time.Hour), nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != revoked {
		t.Errorf("the issuer's CRL lists %d revocations; want %d", len(listed), revoked)
	}

	for _, tc := range []struct {
		name string
		f    store.OrderFilter
		want int
	}{
		{"by identifier: a name ordered three times", store.OrderFilter{Identifier: s.Identifier}, 3},
		{"by account", store.OrderFilter{AccountID: s.AccountID}, perAccount},
		{"by serial", store.OrderFilter{Serial: s.Serial}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.ListOrders(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("%d orders; want %d", len(got), tc.want)
			}
			found := false
			for _, o := range got {
				found = found || o.ID == s.OrderID
			}
			if !found {
				t.Errorf("the sample order %s is not among them", s.OrderID)
			}
		})
	}
}
