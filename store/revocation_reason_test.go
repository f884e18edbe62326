package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestChangingARevocationReasonUpdatesStampAndLedgerAndMarksTheCRLStale(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		c := issuedCert(t, db, "0b", t0.Add(time.Hour))
		if _, err := revoke(t, db, c, "ca", 4); err != nil {
			t.Fatal(err)
		}
		build := func(n int64, _ []CRLEntry) ([]byte, time.Time, time.Time, error) {
			return []byte{1}, t0, t0.Add(time.Hour), nil
		}
		if _, err := db.PublishCRL(ctx, "ca", "CN=ca", t0, build); err != nil {
			t.Fatal(err)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
			t.Fatalf("stale issuers %v %v before the change; want none", stale, err)
		}
		ev := AuditEvent{At: t0, Event: "revocation_reason_changed", Outcome: "success", OrderID: c.OrderID}
		if err := db.ChangeRevocationReason(ctx, c.ID, 1, ev); err != nil {
			t.Fatal(err)
		}
		got, err := db.CertificateOfOrder(ctx, c.OrderID)
		if err != nil || got.Reason == nil || *got.Reason != 1 {
			t.Fatalf("stamp %+v %v; want reason 1", got, err)
		}
		led, err := db.RevocationOf(ctx, c.ID)
		if err != nil || led.Reason == nil || *led.Reason != 1 {
			t.Fatalf("ledger %+v %v; want reason 1", led, err)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || !slices.Equal(stale, []string{"ca"}) {
			t.Errorf("stale issuers %v %v after the change; want [ca], so a lost regeneration is redone", stale, err)
		}
		if evs, _ := db.SearchAudit(ctx, AuditFilter{Event: "revocation_reason_changed"}); len(evs) != 1 {
			t.Errorf("%d revocation_reason_changed rows; want 1", len(evs))
		}
		if err := db.ChangeRevocationReason(ctx, c.ID, 1, ev); !errors.Is(err, ErrWrongState) {
			t.Errorf("the same change again: %v; want ErrWrongState", err)
		}
		unrevoked := issuedCert(t, db, "0c", t0.Add(time.Hour))
		if err := db.ChangeRevocationReason(ctx, unrevoked.ID, 1, ev); !errors.Is(err, ErrWrongState) {
			t.Errorf("a change on an unrevoked certificate: %v; want ErrWrongState", err)
		}
		if evs, _ := db.SearchAudit(ctx, AuditFilter{Event: "revocation_reason_changed"}); len(evs) != 1 {
			t.Errorf("%d revocation_reason_changed rows after refused changes; want 1", len(evs))
		}
	})
}
