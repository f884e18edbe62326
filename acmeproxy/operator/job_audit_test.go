package operator

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An operator's cancel of a signer's job fails its order: the audit rows
// of that order and of its profile must show it.
func TestAnOperatorsRetryAndCancelOfAJobAreAuditedWithItsProfileAndOrder(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	clk := clocktest.New(time.Now())
	q := jobs.NewQueue(db, clk)
	op := &Operator{DB: db, Queue: q, Clock: clk}
	j, _, err := q.Enqueue(ctx, jobs.Spec{Kind: "script_issue", Key: "order1", Delay: time.Hour,
		Payload: map[string]string{"profile": "hsm", "order": "order1"}})
	if err != nil {
		t.Fatal(err)
	}
	actor := authority.Actor{Kind: authority.ActorCLI, ID: "alice"}
	if _, err := op.CancelJobAs(ctx, j.ID, actor); err != nil {
		t.Fatal(err)
	}
	if _, err := op.RetryJobAs(ctx, j.ID, actor); err != nil {
		t.Fatal(err)
	}
	for _, event := range []string{acme.EventJobCancelled, acme.EventJobRetried} {
		rows, err := db.SearchAudit(ctx, store.AuditFilter{Event: event, Profile: "hsm", OrderID: "order1"})
		if err != nil || len(rows) != 1 {
			t.Errorf("%s rows of profile hsm and order order1: %d (%v); want 1", event, len(rows), err)
		}
	}
}
