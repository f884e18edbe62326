package authority

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestARetentionSweepThatDeletedSomethingSaysSoInTheAuditTrail(t *testing.T) {
	ctx := context.Background()
	const day = 24 * time.Hour
	clk := clocktest.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	au, db := newTestAuthority(t, clk)
	acct, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: "k", KeyJWK: []byte(`{}`)}, Client{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := au.CreateOrder(ctx, acct.ID, []acme.Identifier{{Type: acme.IdentifierDNS, Value: "a.example.com"}}, []bool{false}, time.Time{}, time.Time{}, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.FailOrder(ctx, o.ID, nil, "test", clk.Now()); err != nil {
		t.Fatal(err)
	}
	r := Retention{Orders: 30 * day, Certificates: 90 * day}
	sweeps := func() []store.AuditEvent {
		return auditRows(t, db, store.AuditFilter{Event: acme.EventRetentionPruned})
	}

	// 30 days after the order expired it is still there.
	clk.Advance(31 * day)
	if p, err := SweepRetention(ctx, db, r, clk.Now()); err != nil || p.Any() || len(sweeps()) != 0 {
		t.Fatalf("a sweep within the retention: %+v, %v, %d rows; want nothing deleted, nothing written", p, err, len(sweeps()))
	}
	// With both settings at keep nothing is even looked at.
	clk.Advance(2 * day)
	if p, err := SweepRetention(ctx, db, Retention{}, clk.Now()); err != nil || p.Any() || p.Batches != 0 {
		t.Fatalf("a sweep keeping everything: %+v, %v; want no batch at all", p, err)
	}
	p, err := SweepRetention(ctx, db, r, clk.Now())
	if err != nil || p.Orders != 1 {
		t.Fatalf("a sweep past the retention: %+v, %v; want the order deleted", p, err)
	}
	if _, err := db.GetOrder(ctx, "test", o.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the order after the sweep: %v; want not found", err)
	}
	rows := sweeps()
	if len(rows) != 1 || rows[0].ActorKind != ActorSystem || !rows[0].At.Equal(clk.Now()) ||
		!strings.HasPrefix(rows[0].Detail, "the retention sweep deleted 1 orders (1 authorizations, 0 challenges), 0 certificates (0 revocation rows) and 0 deactivated accounts (order_retention 30d, certificate_retention 90d; longest batch ") {
		t.Errorf("the sweep's record: %+v", rows)
	}
	if p, err := SweepRetention(ctx, db, r, clk.Now()); err != nil || p.Any() || len(sweeps()) != 1 {
		t.Errorf("a sweep with nothing to delete: %+v, %v, %d rows; want no new row", p, err, len(sweeps()))
	}
}
