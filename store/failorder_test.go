package store

import (
	"context"
	"errors"
	"testing"
)

// FailOrderAudited writes the order's failure and its audit row (with the
// row's notification jobs) together, or, for an order finished already,
// neither.
func TestAFailedOrderAndItsAuditRowAreWrittenTogether(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := processingOrder(t, db)
		ev := AuditEvent{At: t0, Event: "certificate_issue_failed", Outcome: "failure", Profile: "p", OrderID: o.ID, Detail: "script exited 1",
			Jobs: []NewJob{{Kind: "notify_deliver", Key: "n1", Payload: []byte(`{}`), MaxAttempts: 1}}}
		rows := func() int {
			t.Helper()
			evs, err := db.SearchAudit(ctx, AuditFilter{Event: "certificate_issue_failed", OrderID: o.ID})
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}
		if err := db.FailOrderAudited(ctx, o.ID, []byte(`{}`), "script exited 1", ev, t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetOrder(ctx, "p", o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "invalid" || rows() != 1 {
			t.Errorf("the order is %s with %d audit rows; want invalid with one", got.Status, rows())
		}
		if js, err := db.ListJobs(ctx, JobFilter{Kind: "notify_deliver"}); err != nil || len(js) != 1 {
			t.Errorf("%d notify_deliver jobs (%v); want the row's one", len(js), err)
		}

		err = db.FailOrderAudited(ctx, o.ID, []byte(`{}`), "again", ev, t0)
		if !errors.Is(err, ErrWrongState) || rows() != 1 {
			t.Errorf("failing it again: %v, %d audit rows; want ErrWrongState and still one row", err, rows())
		}
	})
}
