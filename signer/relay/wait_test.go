package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestTheExpectedWaitIsTheWaitOfTheAttemptOrElseOfTheJobOrIdleWithoutOne(t *testing.T) {
	ctx := context.Background()
	var (
		up    *httptest.Server
		reads atomic.Int32
	)
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/order", "/order/1":
			// Processing: come back in a second; then in five minutes,
			// which ends the attempt.
			w.Header().Set("Location", up.URL+"/order/1")
			if reads.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
			} else {
				w.Header().Set("Retry-After", "300")
			}
			_, _ = w.Write([]byte(`{"status":"processing","identifiers":[{"type":"dns","value":"wait.example.com"}],"finalize":"` + up.URL + `/finalize/1"}`))
		default:
			http.NotFound(w, r)
		}
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "wait.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil { // no runner here: queued only
		t.Fatal(err)
	}
	if w := b.s.ExpectedWait(ctx, req.OrderID); w != (signer.Wait{}) {
		t.Errorf("a job due now: expected wait %+v; want no estimate", w)
	}

	// An attempt waiting as the upstream asked: that wait.
	done := make(chan string)
	go func() { done <- b.s.RunJob(ctx, b.job(t, req.OrderID)).String() }()
	var w signer.Wait
	deadline := time.Now().Add(10 * time.Second)
	for ; !w.Known; w = b.s.ExpectedWait(ctx, req.OrderID) {
		if time.Now().After(deadline) {
			t.Fatal("no estimate while the attempt waited for the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if w.For != time.Second {
		t.Errorf("during the upstream's Retry-After: 1: expected wait %s; want 1s", w.For)
	}
	<-done
	if w := b.s.ExpectedWait(ctx, req.OrderID); w != (signer.Wait{}) {
		t.Errorf("after the attempt: expected wait %+v; want none until the job is rescheduled", w)
	}

	// The job waiting for its next attempt: until then.
	now := b.clock.Now()
	js, err := b.db.ClaimJobsIn(ctx, IssueKind, []string{signer.SigningLane("p")}, "test", now, now.Add(time.Minute), 1)
	if err != nil || len(js) != 1 {
		t.Fatalf("claim: %v %d", err, len(js))
	}
	if _, err := b.db.RetryJob(ctx, js[0].ID, "test", now.Add(5*time.Minute), "upstream processing", true, now); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	// Until the job's run_at as stored (to the millisecond): 4 minutes.
	want := b.job(t, req.OrderID).RunAt.Sub(b.clock.Now())
	if w := b.s.ExpectedWait(ctx, req.OrderID); w != (signer.Wait{For: want, Known: true}) || want.Round(time.Second) != 4*time.Minute {
		t.Errorf("a job due in 4 minutes: expected wait %+v; want %s", w, want)
	}
	b.clock.Advance(5 * time.Minute)
	if w := b.s.ExpectedWait(ctx, req.OrderID); w != (signer.Wait{}) {
		t.Errorf("a job overdue: expected wait %+v; want no estimate", w)
	}
	if j := b.job(t, req.OrderID); j.Status != store.JobReady {
		t.Errorf("job is %s", j.Status)
	}

	// The job settled with the order still processing (its failure not
	// recorded, say): no work of the relay's is left on the order.
	now = b.clock.Now()
	js, err = b.db.ClaimJobsIn(ctx, IssueKind, []string{signer.SigningLane("p")}, "test", now, now.Add(time.Minute), 1)
	if err != nil || len(js) != 1 {
		t.Fatalf("claim: %v %d", err, len(js))
	}
	if _, err := b.db.CompleteJob(ctx, js[0].ID, "test", now); err != nil {
		t.Fatal(err)
	}
	if w := b.s.ExpectedWait(ctx, req.OrderID); w != (signer.Wait{Idle: true}) {
		t.Errorf("a settled job: expected wait %+v; want idle", w)
	}
}
