package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// issueWithAlternates takes a fresh order to processing and issues it
// with alternates, the notify jobs of its audit row when withJobs (on
// PostgreSQL the issuance is then a transaction, not one statement).
func issueWithAlternates(t *testing.T, db *DB, alternates []string, withJobs bool) (Certificate, error) {
	t.Helper()
	o := processingOrder(t, db)
	ev := AuditEvent{At: t0, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID, Serial: "0b"}
	if withJobs {
		ev.Jobs = []NewJob{{Kind: "notify_deliver", Payload: []byte(`{}`), RunAt: t0, MaxAttempts: 1}}
	}
	return db.IssueOrder(context.Background(), Certificate{OrderID: o.ID, Profile: "p", AccountID: o.AccountID, Serial: "0b",
		ChainPEM: "default", PublicKey: []byte{1}, NotBefore: t0, NotAfter: t0.Add(time.Hour), AlternatesPEM: alternates}, ev, t0)
}

func TestACertificatesAlternateChainsAreReadBackInTheirOrderByEveryRead(t *testing.T) {
	cases := []struct {
		name       string
		alternates []string
		withJobs   bool
	}{
		{"none", nil, false},
		{"two, issued in one statement", []string{"first alternate", "second alternate"}, false},
		{"two, issued with notify jobs", []string{"first alternate", "second alternate"}, true},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				issued, err := issueWithAlternates(t, db, tc.alternates, tc.withJobs)
				if err != nil {
					t.Fatal(err)
				}
				byID, err := db.GetCertificate(ctx, "p", issued.ID)
				if err != nil {
					t.Fatal(err)
				}
				byOrder, err := db.CertificateOfOrder(ctx, issued.OrderID)
				if err != nil {
					t.Fatal(err)
				}
				bySerial, err := db.CertificatesBySerial(ctx, "p", "0b")
				if err != nil || len(bySerial) != 1 {
					t.Fatalf("by serial: %d certificates, %v", len(bySerial), err)
				}
				for name, c := range map[string]Certificate{"by id": byID, "by order": byOrder, "by serial": bySerial[0]} {
					if !slices.Equal(c.AlternatesPEM, tc.alternates) || c.ChainPEM != "default" {
						t.Errorf("%s: chain %q, alternates %q; want %q", name, c.ChainPEM, c.AlternatesPEM, tc.alternates)
					}
				}
			})
		}
	})
}

func TestACertificateWithMoreAlternateChainsThanKeptIsNotIssued(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		_, err := issueWithAlternates(t, db, []string{"1", "2", "3", "4", "5"}, false)
		if err == nil || !strings.Contains(err.Error(), "at most 4") {
			t.Fatalf("issuing with 5 alternates: %v; want refused, at most 4 kept", err)
		}
	})
}
