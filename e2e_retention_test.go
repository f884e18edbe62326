package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestTheRetentionSweepJobPrunesFailedOrdersPastTheConfiguredRetention(t *testing.T) {
	b, _ := newAuditBench(t, "order_retention 7d\ncertificate_retention keep")
	app := activeApp(t)
	day := 24 * time.Hour
	if app.retention != (authority.Retention{Orders: 7 * day}) {
		t.Fatalf("order_retention 7d, certificate_retention keep: retention %+v", app.retention)
	}
	ctx := context.Background()
	now := time.Now()
	acct, _, err := app.db.CreateAccount(ctx, store.Account{Profile: e2eProfile, Thumbprint: store.NewID(), KeyJWK: []byte(`{}`)}, now.Add(-30*day))
	if err != nil {
		t.Fatal(err)
	}
	failed := func(age time.Duration) string {
		at := now.Add(-age)
		id := acme.Identifier{Type: acme.IdentifierDNS, Value: "old.example.com"}
		o, err := app.db.CreateOrder(ctx, store.Order{Profile: e2eProfile, AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Expires: at.Add(time.Hour)},
			[]store.Authz{{Identifier: id, Expires: at.Add(time.Hour)}}, at)
		if err != nil {
			t.Fatal(err)
		}
		// The sweep that runs at start may have pruned the old order
		// already (pending, expired and untouched for 8 days): then there
		// is nothing left to fail.
		if err := app.db.FailOrder(ctx, o.ID, nil, "test", at); err != nil && !errors.Is(err, store.ErrWrongState) {
			t.Fatal(err)
		}
		return o.ID
	}
	old, recent := failed(8*day), failed(6*day)
	gone := func(id string) bool {
		_, err := app.db.GetOrder(ctx, e2eProfile, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err != nil
	}

	// Run the hourly sweep now, as an operator would.
	status, body := b.adminCall(t, "GET", "/acme_proxy/jobs?kind="+authority.RetentionSweepKind, "")
	var jobs operator.Page[operator.JobView]
	if status != 200 || json.Unmarshal(body, &jobs) != nil || len(jobs.Items) != 1 {
		t.Fatalf("the retention_sweep job: %d %s; want one", status, body)
	}
	id := strconv.FormatInt(jobs.Items[0].ID, 10)
	deadline := time.Now().Add(e2eWait)
	for !gone(old) {
		if time.Now().After(deadline) {
			t.Fatal("the order that failed 8 days ago is still there")
		}
		b.adminCall(t, "POST", "/acme_proxy/jobs/"+id+"/retry", "") // 409 while it runs: the next try
		time.Sleep(50 * time.Millisecond)
	}
	if gone(recent) {
		t.Error("the order that failed 6 days ago was pruned too")
	}
	// The sweep writes its record after its last batch, so it may follow
	// the deletion by a moment.
	var evs []store.AuditEvent
	for {
		evs, err = app.db.SearchAudit(ctx, store.AuditFilter{Event: acme.EventRetentionPruned})
		if err != nil || len(evs) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || len(evs) != 1 || evs[0].ActorKind != authority.ActorSystem ||
		!strings.Contains(evs[0].Detail, "deleted 1 orders") || !strings.Contains(evs[0].Detail, "(order_retention 7d, certificate_retention keep;") {
		t.Errorf("the sweep's record: %+v, %v", evs, err)
	}
}
