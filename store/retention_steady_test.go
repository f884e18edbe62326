package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

const day = 24 * time.Hour

// failNames is a validator that finds every challenge met but those of
// names starting with "fail-".
type failNames struct{}

func (failNames) HTTP01(_ context.Context, _, value, _, _ string) error {
	if strings.HasPrefix(value, "fail-") {
		return problem.IncorrectResponseF("no answer at %s", value)
	}
	return nil
}
func (failNames) DNS01(context.Context, string, string) error             { return nil }
func (failNames) TLSALPN01(context.Context, string, string, string) error { return nil }

// steadyCA is an issuing CA valid from start for longer than the test
// simulates.
func steadyCA(t testing.TB, start time.Time) localca.Source {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "store test CA"},
		NotBefore: start.Add(-time.Hour), NotAfter: start.Add(400 * day),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return localca.Static([]*x509.Certificate{ca}, key)
}

// TestASteadyStateOfOrdersKeepsEveryTableBoundedFor200Days serves, for
// 200 simulated days, the same day each day through the authority and the
// local CA: a new account, five orders — two issued, one issued and then
// revoked, one whose validation fails, one never answered — the account
// of a week ago deactivated, the CRL rebuilt, and the sweeps run. With
// the default order and certificate retention (and an audit retention of
// 60 days: the default 400 is longer than the run), every table stops
// growing once the oldest rows age out (a certificate lives 7 days and is
// kept 90 more), and the CRL always lists exactly the revoked
// certificates not yet expired.
func TestASteadyStateOfOrdersKeepsEveryTableBoundedFor200Days(t *testing.T) {
	store.EachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		start := time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)
		clk := clocktest.New(start)
		db := store.OpenTest(t)
		sgn, err := localca.New(steadyCA(t, start), localca.Options{Clock: clk, Lifetime: 7 * day})
		if err != nil {
			t.Fatal(err)
		}
		au, err := authority.New(authority.Config{Profile: "p", Challenges: []string{acme.ChallengeHTTP01}},
			authority.Options{DB: db, Queue: jobs.NewQueue(db, clk), Signer: sgn, Validator: failNames{}, Clock: clk,
				LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
		if err != nil {
			t.Fatal(err)
		}
		retention := authority.Retention{Orders: 30 * day, Certificates: 90 * day}
		const days, auditRetention = 200, 60 * day
		var (
			accounts []store.Account
			revoked  = map[string]time.Time{} // serial → notAfter
			counts   = make([]map[string]int, days)
			longest  time.Duration
			pruned   store.Pruned
		)
		step := func() { clk.Advance(time.Minute) }
		order := func(acct store.Account, names ...string) store.Order {
			t.Helper()
			idents := make([]acme.Identifier, len(names))
			for i, n := range names {
				idents[i] = acme.Identifier{Type: acme.IdentifierDNS, Value: n}
			}
			o, err := au.CreateOrder(ctx, acct.ID, idents, make([]bool, len(names)), time.Time{}, time.Time{}, "", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			step()
			return o
		}
		answer := func(acct store.Account, o store.Order) {
			t.Helper()
			for _, aid := range o.AuthzIDs {
				a, err := au.OwnAuthz(ctx, acct.ID, aid)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := au.AnswerChallenge(ctx, a.Challenges[0], a, acct.Thumbprint, authority.Client{}); err != nil {
					t.Fatal(err)
				}
			}
			step()
		}
		issue := func(acct store.Account, names ...string) store.Certificate {
			t.Helper()
			o := order(acct, names...)
			answer(acct, o)
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, key)
			if err != nil {
				t.Fatal(err)
			}
			if o, err = au.Finalize(ctx, acct, o.ID, func() ([]byte, error) { return csr, nil }, authority.Client{}); err != nil ||
				o.Status != acme.StatusValid {
				t.Fatalf("finalize: %s, %v", o.Status, err)
			}
			c, err := au.OwnCertificate(ctx, acct.ID, o.CertificateID)
			if err != nil {
				t.Fatal(err)
			}
			step()
			return c
		}

		for d := range days {
			dayStart := clk.Now()
			acct, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: fmt.Sprintf("key-%d", d), KeyJWK: []byte(`{}`)}, authority.Client{})
			if err != nil {
				t.Fatal(err)
			}
			accounts = append(accounts, acct)
			issue(acct, fmt.Sprintf("a%d.example.com", d), fmt.Sprintf("b%d.example.com", d))
			issue(acct, fmt.Sprintf("c%d.example.com", d))
			c := issue(acct, fmt.Sprintf("r%d.example.com", d))
			reason := 4
			if _, err := au.RevokeOrder(ctx, c.OrderID, &reason, authority.Actor{Kind: authority.ActorAdmin, ID: "test"}); err != nil {
				t.Fatal(err)
			}
			revoked[c.Serial] = c.NotAfter
			failing := order(acct, fmt.Sprintf("ok%d.example.com", d), fmt.Sprintf("fail-%d.example.com", d))
			answer(acct, failing)
			if o, err := au.OwnOrder(ctx, acct.ID, failing.ID); err != nil || o.Status != acme.StatusInvalid {
				t.Fatalf("an order whose validation failed: %s, %v", o.Status, err)
			}
			order(acct, fmt.Sprintf("never%d.example.com", d))
			if d >= 7 {
				if _, err := au.DeactivateAccount(ctx, accounts[d-7].ID, authority.Client{}); err != nil {
					t.Fatal(err)
				}
			}

			// The CRL lists the revoked certificates not expired for
			// longer than a day (RFC 5280 §3.3, authority.CRLKeepsExpired),
			// whatever the sweep pruned.
			crl, err := au.RegenerateCRL(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := x509.ParseRevocationList(crl.DER)
			if err != nil {
				t.Fatal(err)
			}
			var listed, want []string
			for _, e := range rl.RevokedCertificateEntries {
				listed = append(listed, hex.EncodeToString(e.SerialNumber.Bytes()))
			}
			for serial, notAfter := range revoked {
				if !notAfter.Before(clk.Now().Add(-authority.CRLKeepsExpired)) {
					want = append(want, serial)
				}
			}
			slices.Sort(listed)
			slices.Sort(want)
			if !slices.Equal(listed, want) {
				t.Fatalf("day %d: the CRL lists %v; want the revoked not expired for a day %v", d, listed, want)
			}

			// The hourly sweeps, once a day here.
			p, err := authority.SweepRetention(ctx, db, retention, clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := authority.SweepAudit(ctx, db, auditRetention, clk.Now()); err != nil {
				t.Fatal(err)
			}
			longest = max(longest, p.LongestBatch)
			p.LongestBatch = 0
			pruned.Orders += p.Orders
			pruned.Certificates += p.Certificates
			pruned.Revocations += p.Revocations
			pruned.Accounts += p.Accounts
			counts[d] = store.RowCounts(t, db)
			clk.Set(dayStart.Add(day))
		}

		// Every table stops growing: the last 50 days hold no more rows of
		// any table than the 50 before them.
		var (
			b    strings.Builder
			grew []string
		)
		tables := make([]string, 0, len(counts[0]))
		for table := range counts[0] {
			tables = append(tables, table)
		}
		slices.Sort(tables)
		peak := func(table string, from, to int) int {
			m := 0
			for d := from; d < to; d++ {
				m = max(m, counts[d][table])
			}
			return m
		}
		fmt.Fprintf(&b, "%-18s %7s %7s %7s %7s %9s\n", "table", "day 50", "day 100", "day 150", "day 199", "peak 150+")
		for _, table := range tables {
			earlier, later := peak(table, 100, 150), peak(table, 150, days)
			fmt.Fprintf(&b, "%-18s %7d %7d %7d %7d %9d\n", table, counts[49][table], counts[99][table], counts[149][table], counts[days-1][table], later)
			if later > earlier {
				grew = append(grew, fmt.Sprintf("%s (peak %d on days 100-149, %d on days 150-199)", table, earlier, later))
			}
		}
		t.Logf("row counts, %d days of 5 orders (3 certificates, 1 revoked), 1 new and 1 deactivated account a day:\n%s"+
			"pruned in all: %d orders, %d certificates, %d revocation rows, %d accounts; longest batch %s",
			days, b.String(), pruned.Orders, pruned.Certificates, pruned.Revocations, pruned.Accounts, longest)
		if len(grew) > 0 {
			t.Errorf("tables still growing after 150 days: %s", strings.Join(grew, "; "))
		}
		// Without retention the orders alone would number 5 a day.
		if got := counts[days-1]["orders"]; got >= 5*days/2 {
			t.Errorf("%d orders left of %d created; want the retention to have pruned most", got, 5*days)
		}
	})
}
