package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// An operator's regeneration is audited with the CRL it stores: when
// another publisher takes its number while it is built, and it is built
// again above it, the attempt that stored nothing leaves no row, and the
// one that stored the CRL leaves one, naming that CRL.
func TestAnAuditedCRLBuiltAgainAfterItsNumberWasTakenWritesOneRowForTheCRLItStored(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		build := func(der byte) CRLBuildFrom {
			return func(r CRLRead) ([]byte, time.Time, time.Time, error) {
				return []byte{der, byte(r.Number)}, t0, t0.Add(24 * time.Hour), nil
			}
		}
		builds := 0
		audit := func(c CRL) AuditEvent {
			return AuditEvent{At: t0, Event: acme.EventCRLRegenerated, Outcome: "success", Profile: "p", ActorKind: "cli", ActorID: "alice",
				Detail: fmt.Sprintf("CRL %d", c.Number)}
		}
		stored, err := db.PublishCRLFromAudited(ctx, "ca", "CN=ca", t0, t0, nil, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
			if builds++; builds == 1 {
				if _, err := db.PublishCRL(ctx, "ca", "CN=ca", t0, func(n int64, e []CRLEntry) ([]byte, time.Time, time.Time, error) {
					return build('i')(CRLRead{Number: n, Entries: e})
				}); err != nil {
					t.Errorf("the other publisher: %v", err)
				}
			}
			return build('o')(r)
		}, audit)
		if err != nil {
			t.Fatal(err)
		}
		if builds != 2 || stored.Number != 2 {
			t.Fatalf("built %d times, stored #%d; want built twice, stored #2 above the other publisher's", builds, stored.Number)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{Event: acme.EventCRLRegenerated})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Detail != "CRL 2" || rows[0].ActorID != "alice" {
			t.Errorf("audit rows %+v; want one, by alice, for CRL 2", rows)
		}
	})
}
