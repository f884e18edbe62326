package acmeproxy

import (
	"context"
	"path"
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A signer's job may report a failure twice (an operator's retry of an
// abandoned job, a crash in the middle of an abandon): the order fails
// once, with one audit row, and the second report changes nothing.
func TestAnOrderFailedTwiceIsFailedAndAuditedOnce(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	alice := e.rawClient()
	alice.register()
	o := alice.order(dnsID("twice.example.com"))
	id := path.Base(o.url)
	au := e.srv.Authority()
	if err := au.Failed(ctx, id, "the first report"); err != nil {
		t.Fatal(err)
	}
	if err := au.Failed(ctx, id, "the second report"); err != nil {
		t.Errorf("failing a failed order again: %v; want nothing to do", err)
	}
	if rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateIssueFailed, OrderID: id}); len(rows) != 1 {
		t.Errorf("%d certificate_issue_failed rows; want 1", len(rows))
	}
	got, err := e.db.OrderByID(ctx, id)
	if err != nil || got.Status != vocab.StatusInvalid || got.FailureDetail != "the first report" {
		t.Errorf("the order: %s %q (%v); want invalid with the first report's detail", got.Status, got.FailureDetail, err)
	}
}
