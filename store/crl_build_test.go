package store

import (
	"context"
	"slices"
	"testing"
	"time"
)

// A CRL of many entries takes long to build and sign; the store must not
// hold its one writer while it does, or every issuance waits behind it.
func TestACRLIsBuiltWhileOtherWritesCommitAndSaysWhatItLacks(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		first := issuedCert(t, db, "01", t0.Add(48*time.Hour))
		late := issuedCert(t, db, "02", t0.Add(48*time.Hour))
		if _, err := revoke(t, db, first, "ca", 1); err != nil {
			t.Fatal(err)
		}
		var (
			listed  []string
			lateRev Revocation
			builds  int
		)
		crl, err := db.PublishCRL(ctx, "ca", "CN=ca", t0.Add(time.Minute), func(number int64, entries []CRLEntry) ([]byte, time.Time, time.Time, error) {
			builds++
			listed = listed[:0]
			for _, e := range entries {
				listed = append(listed, e.Serial)
			}
			if builds == 1 {
				// Another write while the CRL is built: a revocation,
				// as a client's request would record it. Inside the
				// write path it would wait for this build forever.
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				var err error
				if lateRev, err = db.RevokeCertificate(wctx, Revocation{CertificateID: late.ID, Profile: "p", OrderID: late.OrderID,
					Serial: late.Serial, IssuerKeyID: "ca", RevokedAt: t0.Add(time.Minute), NotAfter: late.NotAfter, ActorKind: "admin"},
					AuditEvent{At: t0, Event: "certificate_revoked", Outcome: "success", OrderID: late.OrderID}); err != nil {
					t.Errorf("a revocation while the CRL was built: %v", err)
				}
			}
			return []byte{byte(number)}, t0, t0.Add(24 * time.Hour), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if builds != 1 || !slices.Equal(listed, []string{"01"}) || crl.Entries != 1 {
			t.Errorf("built %d times, listing %v (%d entries); want once, 01 only", builds, listed, crl.Entries)
		}
		if lateRev.ID == 0 || crl.LedgerSeq >= lateRev.ID {
			t.Errorf("the CRL claims ledger row %d; the revocation recorded while it was built is row %d", crl.LedgerSeq, lateRev.ID)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || !slices.Equal(stale, []string{"ca"}) {
			t.Errorf("stale issuers %v (%v); want ca, whose CRL lacks the late revocation", stale, err)
		}
		next, err := db.PublishCRL(ctx, "ca", "CN=ca", t0.Add(2*time.Minute), func(number int64, entries []CRLEntry) ([]byte, time.Time, time.Time, error) {
			listed = listed[:0]
			for _, e := range entries {
				listed = append(listed, e.Serial)
			}
			return []byte{byte(number)}, t0, t0.Add(24 * time.Hour), nil
		})
		if err != nil || !slices.Equal(listed, []string{"01", "02"}) || next.Number != crl.Number+1 {
			t.Errorf("the next CRL #%d lists %v (%v); want #%d with 01 and 02", next.Number, listed, err, crl.Number+1)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
			t.Errorf("stale issuers %v (%v) after the next CRL; want none", stale, err)
		}
	})
}

// Two publishers of one CA (two instances, or an operator's regeneration
// beside the job) build at once: the one that stores second must not store
// its CRL under a number the other took, nor drop it silently.
func TestACRLWhoseNumberWasTakenWhileItWasBuiltIsBuiltAgainAboveIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		var (
			numbers []int64
			inner   CRL
		)
		build := func(der byte) CRLBuild {
			return func(number int64, _ []CRLEntry) ([]byte, time.Time, time.Time, error) {
				return []byte{der, byte(number)}, t0, t0.Add(24 * time.Hour), nil
			}
		}
		outer, err := db.PublishCRL(ctx, "ca", "CN=ca", t0, func(number int64, entries []CRLEntry) ([]byte, time.Time, time.Time, error) {
			numbers = append(numbers, number)
			if len(numbers) == 1 {
				var err error
				if inner, err = db.PublishCRL(ctx, "ca", "CN=ca", t0, build('i')); err != nil {
					t.Errorf("the other publisher: %v", err)
				}
			}
			return build('o')(number, entries)
		})
		if err != nil {
			t.Fatal(err)
		}
		if inner.Number != 1 || !slices.Equal(numbers, []int64{1, 2}) || outer.Number != 2 {
			t.Errorf("the other CRL is #%d; this one was built as %v and published as #%d; want #1, then [1 2] and #2",
				inner.Number, numbers, outer.Number)
		}
		got, err := db.GetCRL(ctx, "ca")
		if err != nil || got.Number != 2 || string(got.DER) != "o\x02" {
			t.Errorf("stored CRL #%d %q (%v); want this one, #2", got.Number, got.DER, err)
		}
		if n, err := db.CRLNumber(ctx, "ca"); err != nil || n != 2 {
			t.Errorf("CRLNumber %d (%v); want 2", n, err)
		}
	})
}
