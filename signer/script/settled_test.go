package script

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An operator may retry an issuance job whose order failed meanwhile (a
// cancel abandons the order): the attempt runs no program and fails,
// saying why, rather than reporting done.
func TestAnAttemptForAnOrderThatFailedRunsNothingAndSaysTheOrderIsInvalid(t *testing.T) {
	ctx := context.Background()
	ran := filepath.Join(t.TempDir(), "ran")
	b := newBench(t, Options{Command: []string{program(t, "touch "+ran+"\nexit 1")}})
	req, _ := b.finalized(t, "failed.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := b.db.FailOrder(ctx, req.OrderID, nil, "cancelled by an operator", time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(ctx, b.job(t, req.OrderID))
	if out.Kind() != "failed" || !strings.Contains(out.String(), "is invalid") {
		t.Errorf("the attempt: %s; want failed saying the order is invalid", out)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the program ran for an order that had failed")
	}
}
