package authority

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The HTTP front's tests (package acmeproxy) drive the authority through
// real requests; these are the parts of it no request can reach.

// stubSigner is a signer that is never asked to sign here.
type stubSigner struct{}

func (stubSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{}, nil
}
func (stubSigner) Revoke(context.Context, *x509.Certificate, *int) error { return nil }
func (stubSigner) RevocationRoute() signer.RevocationRoute               { return signer.RevokeInLedger }

// stubValidator is a validator that is never asked to validate here.
type stubValidator struct{}

func (stubValidator) HTTP01(context.Context, string, string, string, string) error { return nil }
func (stubValidator) DNS01(context.Context, string, string) error                  { return nil }
func (stubValidator) TLSALPN01(context.Context, string, string, string) error      { return nil }

// newTestAuthority is an authority of profile "test" over a fresh SQLite
// store.
func newTestAuthority(t *testing.T, clk *clocktest.Fake) (*Authority, *store.DB) {
	t.Helper()
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	au, err := New(Config{Profile: "test"}, Options{DB: db, Queue: jobs.NewQueue(db, nil), Signer: stubSigner{}, Validator: stubValidator{},
		Clock: clk, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return au, db
}

func auditRows(t *testing.T, db *store.DB, f store.AuditFilter) []store.AuditEvent {
	t.Helper()
	evs, err := db.SearchAudit(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestReverseLookupsOfClientsAreBoundedAndCached(t *testing.T) {
	calls := 0
	slow := newReverseNames(func(ctx context.Context, addr string) ([]string, error) {
		calls++
		<-ctx.Done()
		return nil, ctx.Err()
	})
	now := time.Now()
	began := time.Now()
	if got := slow.name(context.Background(), "192.0.2.1", now); got != "" {
		t.Errorf("a lookup that timed out gave %q", got)
	}
	if took := time.Since(began); took > 3*reverseLookupTimeout {
		t.Errorf("a hung resolver held the request for %s", took)
	}
	slow.name(context.Background(), "192.0.2.1", now.Add(time.Second))
	if calls != 1 {
		t.Errorf("%d lookups of one address within the negative TTL; want 1", calls)
	}
	slow.name(context.Background(), "192.0.2.1", now.Add(reverseNameNegativeTTL+time.Second))
	if calls != 2 {
		t.Errorf("%d lookups after the negative TTL; want 2", calls)
	}

	fast := newReverseNames(func(context.Context, string) ([]string, error) { return []string{"client.example.com."}, nil })
	if got := fast.name(context.Background(), "192.0.2.2", now); got != "client.example.com" {
		t.Errorf("name %q; want client.example.com", got)
	}
	if got := fast.name(context.Background(), "not an address", now); got != "" {
		t.Errorf("name of a non-address %q", got)
	}
}

func TestTheRefusalTallyIsBoundedAndCountsIPv6ByItsSlash64(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	au, db := newTestAuthority(t, clk)
	au.refusals = &refusalTally{interval: RefusalInterval, capacity: 3}
	for _, ip := range []string{
		"192.0.2.1", "192.0.2.1", "::ffff:192.0.2.1", // one source
		"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", // one /64
		"2001:db8:1:3::1",            // the third source fills the tally
		"198.51.100.7", "192.0.2.99", // past the bound: the overflow
		"192.0.2.1", // a tracked source is still counted as itself
	} {
		au.tallyRefusal(ctx, Client{IP: ip, UserAgent: strings.Repeat("u", 20000)}, RefusalMalformed)
	}
	if n := len(au.refusals.sources); n != 3 {
		t.Errorf("%d sources tracked; the bound is 3", n)
	}
	au.FlushRefusals(ctx, true)
	sum := auditRows(t, db, store.AuditFilter{Event: acme.EventRevocationRefusals})
	got := map[string]string{}
	for _, r := range sum {
		got[r.ClientIP] = r.Detail
	}
	want := map[string]string{
		"192.0.2.1":         "4 refused revocation requests from 192.0.2.1 ",
		"2001:db8:1:2::/64": "2 refused revocation requests from 2001:db8:1:2::/64 ",
		"2001:db8:1:3::/64": "1 refused revocation requests from 2001:db8:1:3::/64 ",
		"":                  "2 refused revocation requests from sources past the first 3 ",
	}
	if len(got) != len(want) {
		t.Errorf("summary rows for %v; want %v", got, want)
	}
	for ip, prefix := range want {
		if !strings.HasPrefix(got[ip], prefix) {
			t.Errorf("summary of %q: %q; want it to start %q", ip, got[ip], prefix)
		}
	}
	// Written, the tally is empty: the next flush writes nothing.
	au.FlushRefusals(ctx, true)
	if again := auditRows(t, db, store.AuditFilter{Event: acme.EventRevocationRefusals}); len(again) != len(sum) {
		t.Errorf("a second flush wrote %d more rows", len(again)-len(sum))
	}
}

func TestNeitherHalfOfAMintedEABKeyBeginsWithADashThatACommandLineWouldTakeForAFlag(t *testing.T) {
	// certbot --eab-kid <kid> --eab-hmac-key <key> (and lego's --eab.kid,
	// --eab.hmac) read a value beginning with a dash as the next flag.
	// 4,096 of each: a leading dash (one in 64 of plain base64url) would
	// show with a probability of 1 - (63/64)^4096, all but certainly.
	tests := []struct {
		name string
		mint func() (string, error)
		size int // characters
	}{
		{"the key id", func() (string, error) { return newEABKID(), nil }, 22},
		{"the MAC key as the operator is shown it", func() (string, error) {
			k, err := newEABMACKey()
			return base64.RawURLEncoding.EncodeToString(k), err
		}, 43},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 4096 {
				v, err := tt.mint()
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(v, "-") || len(v) != tt.size {
					t.Fatalf("%q: want %d base64url characters, the first not a dash", v, tt.size)
				}
			}
		})
	}
}
