package notify_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A delivery's attempts, at the runner's own backoff (30 s doubling to
// an hour, ±10 %), last the delivery's 24 hours (README: "up to 30
// attempts within 24 hours"): a receiver that is down for most of a day
// still gets the event once it is back, and one down for the whole day
// makes the delivery fail at its deadline, not hours before it.
func TestADeliveryOutlastsAReceiverDownForMostOfItsLifetime(t *testing.T) {
	for _, tt := range []struct {
		name     string
		downFor  time.Duration
		want     store.JobStatus
		failedBy time.Duration // least time from the event to the failure
	}{
		{"a receiver back after 20 hours gets the event", 20 * time.Hour, store.JobDone, 0},
		{"a receiver down all day fails the delivery at its deadline", 25 * time.Hour, store.JobFailed, 22 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := clocktest.New(start)
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				if clk.Now().Before(start.Add(tt.downFor)) {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(srv.Close)
			db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "n.db"), store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			dst := notify.Destination{Type: notify.TypeWebhook, URL: srv.URL}
			d := notify.NewDeliverer(notify.Options{})
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			q := jobs.NewQueue(db, clk)
			r, err := jobs.NewRunner(q, []jobs.Handler{d}, jobs.RunnerOptions{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			ev := sampleEvent(acme.EventCertificateIssued)
			ev.Time = start
			if err := db.InsertAudit(ctx, store.AuditEvent{At: ev.Time, Event: ev.Event, Outcome: "success", Profile: ev.Profile,
				Jobs: notify.Jobs([]notify.Destination{dst}, ev)}); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Stop() })
			js, err := q.List(ctx, store.JobFilter{Kind: notify.Kind, Limit: 10})
			if err != nil || len(js) != 1 {
				t.Fatalf("delivery jobs: %d, %v; want one", len(js), err)
			}
			// Whenever the runner is idle, jump to the delivery's next
			// attempt, then to the runner's next poll: every retry is
			// seen, nothing sleeps its backoff.
			var j store.Job
			for {
				for r.Running() != 0 {
					time.Sleep(time.Millisecond)
				}
				if j, err = q.Get(ctx, js[0].ID); err != nil {
					t.Fatal(err)
				}
				if j.Status == store.JobDone || j.Status == store.JobFailed {
					break
				}
				if j.RunAt.After(clk.Now()) {
					clk.Set(j.RunAt)
					continue
				}
				at, err := clk.NextTimer(ctx)
				if err != nil {
					t.Fatalf("after %d attempts: %v", j.Attempts, err)
				}
				clk.Set(at)
			}
			if j.Status != tt.want {
				t.Fatalf("the delivery is %s after %d attempts, at %s after the event (%s); want %s",
					j.Status, j.Attempts, j.UpdatedAt.Sub(start), j.LastError, tt.want)
			}
			if tt.failedBy > 0 && j.UpdatedAt.Sub(start) < tt.failedBy {
				t.Errorf("the delivery failed %s after the event, after %d attempts; want its attempts to last at least %s",
					j.UpdatedAt.Sub(start), j.Attempts, tt.failedBy)
			}
			if int(requests.Load()) != j.Attempts {
				t.Errorf("%d requests for %d attempts", requests.Load(), j.Attempts)
			}
		})
	}
}
