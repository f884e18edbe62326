package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// seedMany seeds n issued orders of account "acct" in one SeedIssued:
// order i for one name, or three for every third, each authorization
// offering http-01, dns-01 and tls-alpn-01 — more rows of each table
// than one statement of a rowBatch holds.
func seedMany(t *testing.T, db *DB, n int) ([]SeededOrder, []Order) {
	t.Helper()
	ctx := context.Background()
	if err := db.SeedAccounts(ctx, []Account{{ID: "acct", Profile: "p", Thumbprint: "t", KeyJWK: []byte(`{}`)}}, t0); err != nil {
		t.Fatal(err)
	}
	seeds := make([]SeededOrder, n)
	for i := range seeds {
		ids := []acme.Identifier{{Type: "dns", Value: fmt.Sprintf("n%d.example.com", i)}}
		if i%3 == 0 {
			ids = append(ids, acme.Identifier{Type: "dns", Value: fmt.Sprintf("a%d.example.com", i)},
				acme.Identifier{Type: "dns", Value: fmt.Sprintf("b%d.example.com", i)})
		}
		seeds[i] = SeededOrder{Profile: "p", AccountID: "acct", Identifiers: ids,
			Challenges: []string{"http-01", "dns-01", "tls-alpn-01"}, Created: t0.Add(time.Duration(i) * time.Second),
			Certificate: Certificate{Serial: fmt.Sprintf("5eed%04x", i), ChainPEM: "-", PublicKey: []byte{byte(i)},
				NotBefore: t0, NotAfter: t0.Add(90 * 24 * time.Hour)}}
	}
	orders, err := db.SeedIssued(ctx, seeds)
	if err != nil {
		t.Fatal(err)
	}
	return seeds, orders
}

func TestSeededOrdersReadBackAsAnIssuanceLeavesThemAcrossStatementBoundaries(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		const n = 1203 // orders: 1,000 in the first statement; challenges: 3,609 of 5,215 rows in four
		seeds, orders := seedMany(t, db, n)
		if len(orders) != n {
			t.Fatalf("SeedIssued returned %d orders, want %d", len(orders), n)
		}
		wantRows := map[string]int{"orders": n, "certificates": n}
		for _, s := range seeds {
			wantRows["order_identifiers"] += len(s.Identifiers)
			wantRows["authorizations"] += len(s.Identifiers)
			wantRows["challenges"] += 3 * len(s.Identifiers)
		}
		for table, want := range wantRows {
			var got int
			if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s holds %d rows, want %d", table, got, want)
			}
		}
		for _, i := range []int{0, 1, 999, 1000, 1001, n - 1} {
			o, err := db.GetOrder(ctx, "p", orders[i].ID)
			if err != nil {
				t.Fatalf("order %d: %v", i, err)
			}
			if o.Status != acme.StatusValid || len(o.Identifiers) != len(seeds[i].Identifiers) ||
				o.Identifiers[0] != seeds[i].Identifiers[0] || !o.CreatedAt.Equal(seeds[i].Created) {
				t.Errorf("order %d reads back as %+v, seeded %+v", i, o, seeds[i])
			}
			if len(o.AuthzIDs) != len(seeds[i].Identifiers) {
				t.Fatalf("order %d has %d authorizations, want %d", i, len(o.AuthzIDs), len(seeds[i].Identifiers))
			}
			for k, aid := range o.AuthzIDs {
				a, err := db.GetAuthz(ctx, "p", aid)
				if err != nil {
					t.Fatalf("order %d's authorization %d: %v", i, k, err)
				}
				if a.Status != acme.StatusValid || a.Identifier != seeds[i].Identifiers[k] || len(a.Challenges) != 3 {
					t.Errorf("order %d's authorization %d reads back as %+v", i, k, a)
					continue
				}
				for j, c := range a.Challenges {
					wantStatus := acme.StatusPending
					if j == 0 {
						wantStatus = acme.StatusValid
					}
					if c.Type != seeds[i].Challenges[j] || c.Status != wantStatus || (j == 0) == c.Validated.IsZero() {
						t.Errorf("order %d's challenge %d reads back as %+v", i, j, c)
					}
				}
			}
			cs, err := db.CertificatesBySerial(ctx, "p", seeds[i].Certificate.Serial)
			if err != nil || len(cs) != 1 {
				t.Fatalf("order %d's certificate: %d, %v; want 1", i, len(cs), err)
			}
			c := cs[0]
			if c.ID != o.CertificateID || c.OrderID != o.ID || c.PublicKey[0] != byte(i) {
				t.Errorf("order %d's certificate reads back as %+v", i, c)
			}
		}
	})
}

func TestSeededRevocationsStampEveryCertificateAndRecordItsLedgerRow(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		seeds, orders := seedMany(t, db, 1100)
		at := t0.Add(time.Hour)
		reason := 1
		var revs []Revocation
		for i, o := range orders {
			if i%2 == 1 {
				continue // every other certificate stays unrevoked
			}
			r := Revocation{CertificateID: o.CertificateID, Profile: "p", OrderID: o.ID, Serial: seeds[i].Certificate.Serial,
				IssuerKeyID: "ca", RevokedAt: at, NotAfter: seeds[i].Certificate.NotAfter, ActorKind: "operator", ActorID: "seed"}
			if i%4 == 0 {
				r.Reason = &reason // and every other one of those without a reason
			}
			revs = append(revs, r)
		}
		if err := db.SeedRevocations(ctx, revs); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 1, 2, 998, 1000, 1001, 1002, 1098, 1099} {
			cs, err := db.CertificatesBySerial(ctx, "p", seeds[i].Certificate.Serial)
			if err != nil || len(cs) != 1 {
				t.Fatalf("order %d's certificate: %d, %v; want 1", i, len(cs), err)
			}
			c := cs[0]
			revoked := i%2 == 0
			if c.RevokedAt.IsZero() == revoked || (revoked && !c.RevokedAt.Equal(at)) {
				t.Errorf("certificate %d: revoked at %v, want revoked %v at %v", i, c.RevokedAt, revoked, at)
			}
			r, err := db.RevocationOf(ctx, c.ID)
			switch {
			case !revoked && err == nil:
				t.Errorf("certificate %d has a ledger row, but was not revoked", i)
			case revoked && err != nil:
				t.Errorf("certificate %d's ledger row: %v", i, err)
			case revoked && ((r.Reason != nil) != (i%4 == 0) || r.IssuerKeyID != "ca" || r.Serial != seeds[i].Certificate.Serial):
				t.Errorf("certificate %d's ledger row reads back as %+v", i, r)
			}
		}
	})
}
