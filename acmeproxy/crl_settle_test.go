package acmeproxy

import (
	"context"
	"crypto/x509"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// heldOutcome stands in for a job handler: once armed, it holds the
// outcome of the next attempt that ends done until released, so that
// the job stays running after everything its handler looked at, as a
// runner slow to record the outcome (a loaded machine, a slow database)
// leaves it.
type heldOutcome struct {
	jobs.Handler
	armed   atomic.Bool
	held    chan int64 // the job whose outcome is held
	release chan struct{}
}

func (h *heldOutcome) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	out := h.Handler.Run(ctx, job)
	if out.Kind() == "done" && h.armed.CompareAndSwap(true, false) {
		h.held <- job.ID
		<-h.release
	}
	return out
}

// A revocation whose regeneration request finds the CRL job still
// running — past its build and its last look at the ledger, its outcome
// not yet recorded — is not left for the refresh a minute later: the job
// runs again, and the CRL it stores lists the revocation.
func TestARevocationRecordedWhileTheCRLJobRecordsItsOutcomeIsOnTheNextCRL(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hold := &heldOutcome{held: make(chan int64, 1), release: make(chan struct{})}
		e := newTestEnvWith(t, envOptions{wrapJobs: func(h jobs.Handler) jobs.Handler {
			if h.Kind() != authority.CRLRegenerateKind {
				return h
			}
			hold.Handler = h
			return hold
		}})
		var releaseOnce atomic.Bool
		release := func() {
			if releaseOnce.CompareAndSwap(false, true) {
				close(hold.release)
			}
		}
		defer release() // before the runner stops
		c := e.client(ctx)
		first := e.issue(ctx, c, "first.example.com")
		second := e.issue(ctx, c, "second.example.com")
		live := func() []store.Job {
			var out []store.Job
			for _, st := range []store.JobStatus{store.JobReady, store.JobRunning} {
				js, err := e.queue.List(context.Background(), store.JobFilter{Kind: authority.CRLRegenerateKind, Status: st})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, js...)
			}
			return out
		}
		// The regeneration the first CRL was queued by is over, so that
		// the next one is the first revocation's.
		for deadline := time.Now().Add(20 * time.Second); len(live()) > 0; {
			if time.Now().After(deadline) {
				t.Fatalf("a CRL job is still live: %+v", live())
			}
			time.Sleep(20 * time.Millisecond)
		}

		hold.armed.Store(true)
		if err := c.RevokeCert(ctx, nil, first.der, acme.CRLReasonKeyCompromise); err != nil {
			t.Fatal(err)
		}
		var id int64
		select {
		case id = <-hold.held:
		case <-ctx.Done():
			t.Fatal("no CRL job attempt ended done after the first revocation")
		}
		e.crl(lists(first.leaf.SerialNumber)) // built, served; the job still running
		if err := c.RevokeCert(ctx, nil, second.der, acme.CRLReasonKeyCompromise); err != nil {
			t.Fatal(err)
		}
		release()

		// Once the job is recorded done, the CRL it leaves lists the
		// second revocation: nothing else would build one before the
		// refresh, a minute on.
		for {
			j, err := e.queue.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status == store.JobDone {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("CRL job %d is %s (last error %q); want done", id, j.Status, j.LastError)
			}
			time.Sleep(20 * time.Millisecond)
		}
		stored, err := e.srv.Authority().CurrentCRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		crl, err := x509.ParseRevocationList(stored.DER)
		if err != nil {
			t.Fatal(err)
		}
		if !lists(first.leaf.SerialNumber, second.leaf.SerialNumber)(crl) {
			stale, _ := e.db.StaleCRLIssuers(ctx)
			t.Fatalf("CRL job %d was recorded done leaving CRL %d, which lacks the revocation recorded while it ran (CAs whose CRL lacks revocations: %v; live CRL jobs: %d)",
				id, stored.Number, stale, len(live()))
		}
	})
}
