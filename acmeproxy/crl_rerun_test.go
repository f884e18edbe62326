package acmeproxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A CRL regeneration queued for anything but a revocation — the refresh
// of a missing, old or stale CRL, a fetch of one not yet published —
// that finds the CRL job running leaves it to finish: that attempt
// builds from the ledger as it is, nothing has changed since that it
// would miss, and asking it to run again would build and sign one CRL
// more for nothing. (A revocation does ask, see
// TestARevocationRecordedWhileTheCRLJobRecordsItsOutcomeIsOnTheNextCRL.)
func TestACRLRequestThatIsNoRevocationDoesNotRunTheRunningCRLJobAgain(t *testing.T) {
	tests := []struct {
		name    string
		request func(ctx context.Context, au *authority.Authority) error
	}{
		{"the refresh", func(ctx context.Context, au *authority.Authority) error {
			return authority.RefreshCRLs(ctx, []*authority.Authority{au})
		}},
		{"a fetch of the CRL not yet published", func(ctx context.Context, au *authority.Authority) error {
			if _, err := au.CurrentCRL(ctx); !errors.Is(err, authority.ErrNoCRL) {
				return err
			}
			return nil
		}},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				clk := clocktest.New(time.Now())
				db, err := dialectOf(t).openAt(ctx, newPlace(t), store.SQLiteOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				q := jobs.NewQueue(db, clk)
				_, src := newTestCA(t)
				sgn, err := localca.New(src, localca.Options{Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				s, err := NewServer(ctx, ProfileConfig{Profile: "p"}, Options{DB: db, Queue: q, Signer: sgn, Validator: sjValidator{}, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				au := s.Authority()
				// The missing first CRL's regeneration, taken by a runner
				// and building now.
				if err := authority.RefreshCRLs(ctx, []*authority.Authority{au}); err != nil {
					t.Fatal(err)
				}
				queued, err := q.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Status: store.JobReady})
				if err != nil || len(queued) != 1 {
					t.Fatalf("CRL jobs queued: %+v %v; want 1", queued, err)
				}
				job := queued[0]
				now := clk.Now().Add(time.Hour) // past any coalescing delay
				claimed, err := db.ClaimJobsIn(ctx, job.Kind, []string{job.Lane}, "runner", now, now.Add(time.Minute), 1)
				if err != nil || len(claimed) != 1 || claimed[0].ID != job.ID {
					t.Fatalf("claiming the CRL job: %+v %v; want job %d", claimed, err, job.ID)
				}

				if err := tc.request(ctx, au); err != nil {
					t.Fatal(err)
				}
				if st, err := db.CompleteJob(ctx, job.ID, "runner", now); err != nil || st != store.JobDone {
					t.Fatalf("the running attempt recorded done: %v %v; want the job done, not run again", st, err)
				}
			})
		}
	})
}
