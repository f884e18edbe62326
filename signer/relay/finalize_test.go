package relay

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// relayHandler runs the signer's relay_issue jobs in a jobs.Runner.
type relayHandler struct{ s *Signer }

func (relayHandler) Kind() string { return IssueKind }
func (h relayHandler) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	return h.s.RunJob(ctx, job)
}
func (relayHandler) Recover(context.Context, *jobs.Queue) error { return nil }
func (h relayHandler) Abandon(ctx context.Context, job *jobs.Job, reason string) error {
	return h.s.AbandonJob(ctx, job, reason)
}

func TestARelayedFinalizeAnswersOnceTheCertificateIsRecordedWithoutWaitingForTheJobsBookkeeping(t *testing.T) {
	ctx := context.Background()
	b, _ := pebbleBench(t)
	b.s.opts.FinalizeWait = time.Minute
	r, err := jobs.NewRunner(b.queue, []jobs.Handler{relayHandler{b.s}}, jobs.RunnerOptions{Lanes: []string{signer.SigningLane("p")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	// The attempt stops right after it announced the certificate
	// recorded: the mapping's and the job's settles wait for the test.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	b.s.afterIssued = func() { <-release }

	req := b.finalized(t, "quick.example.com")
	answered := make(chan error, 1)
	go func() {
		out, err := b.s.Issue(ctx, req)
		if err == nil && !out.Pending {
			t.Errorf("outcome %+v; want pending, the order read back valid", out)
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the finalize still waits 30 s after the relay recorded the certificate")
	}
	b.settler.mu.Lock()
	chain := b.settler.issued[req.OrderID]
	b.settler.mu.Unlock()
	if len(chain) == 0 {
		t.Error("the finalize answered before the certificate was recorded")
	}
	if j := b.job(t, req.OrderID); j.Status != store.JobRunning {
		t.Errorf("the relay job is %s when the finalize answers; want running, its settle after the answer", j.Status)
	}
}
