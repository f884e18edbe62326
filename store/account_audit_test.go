package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// A deactivation, its audit row and its notifications are stored together:
// the first deactivation of a valid account stores all three; a second one
// finds the account not valid (ErrWrongState) and stores none of them.
func TestAnAuditedDeactivationStoresTheRowAndItsJobsOnlyWithTheChange(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := time.Now().Truncate(time.Millisecond)
		acct, _, err := db.CreateAccount(ctx, Account{Profile: "p", Thumbprint: "tp", KeyJWK: []byte(`{}`)}, now)
		if err != nil {
			t.Fatal(err)
		}
		ev := AuditEvent{At: now, Event: acme.EventAccountDeactivated, Outcome: "success", Profile: "p", ActorKind: "acme_account",
			ActorID: acct.ID, ClientIP: "192.0.2.7", Jobs: []NewJob{{Kind: "notify_deliver", RunAt: now, MaxAttempts: 3}}}
		got, err := db.DeactivateAccountAudited(ctx, acct.ID, ev, now)
		if err != nil || got.Status != acme.StatusDeactivated {
			t.Fatalf("DeactivateAccountAudited: %+v %v; want the deactivated account", got, err)
		}
		if _, err := db.DeactivateAccountAudited(ctx, acct.ID, ev, now.Add(time.Second)); !errors.Is(err, ErrWrongState) {
			t.Fatalf("a second deactivation: %v; want ErrWrongState", err)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{Event: acme.EventAccountDeactivated})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].AccountID != acct.ID || rows[0].ClientIP != "192.0.2.7" || rows[0].ActorID != acct.ID {
			t.Fatalf("audit rows %+v; want one for account %s, as given", rows, acct.ID)
		}
		jobs, err := db.ListJobs(ctx, JobFilter{Kind: "notify_deliver"})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 1 {
			t.Fatalf("%d notification jobs, want the one of the first deactivation", len(jobs))
		}
	})
}
