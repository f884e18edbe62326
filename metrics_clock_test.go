package caddyacmeproxy

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The clock_skew_seconds gauge reads the skew of this instance's clock
// from the PostgreSQL server's that the app's job runner measured as it
// started; on SQLite, with no server clock to compare with, it is absent.
func TestTheClockSkewGaugeReadsTheSkewTheRunnerMeasured(t *testing.T) {
	tests := []struct {
		name      string
		postgres  bool
		skew      time.Duration
		wantGauge bool
	}{
		{name: "ok/postgres, the clock 30s ahead", postgres: true, skew: 30 * time.Second, wantGauge: true},
		{name: "ok/postgres, the clock in step", postgres: true, skew: 0, wantGauge: true},
		{name: "ok/sqlite: nothing to compare with", postgres: false, skew: 30 * time.Second, wantGauge: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var db *store.DB
			var err error
			if tt.postgres {
				db, err = store.OpenPostgres(ctx, pgtest.DSN(t), store.PostgresOptions{})
			} else {
				db, err = store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "m.db"), store.SQLiteOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			clockSkew.Store(nil) // a reading of an earlier test of this process
			reg := prometheus.NewRegistry()
			if err := registerProxyMetrics(reg, db, nil); err != nil {
				t.Fatal(err)
			}
			// The fake clock stands still: by the time it is read it is
			// behind the skew by the test's own time, a fraction of a second.
			r, err := jobs.NewRunner(jobs.NewQueue(db, nil), nil, jobs.RunnerOptions{Clock: clocktest.New(time.Now().Add(tt.skew)),
				OnClockReading: observeClockReading})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got *float64
			for _, mf := range mfs {
				if mf.GetName() == "caddy_acme_proxy_clock_skew_seconds" {
					v := mf.GetMetric()[0].GetGauge().GetValue()
					got = &v
				}
			}
			if (got != nil) != tt.wantGauge {
				t.Fatalf("clock_skew_seconds in the scrape: %v, want %v", got != nil, tt.wantGauge)
			}
			if got != nil && math.Abs(*got-tt.skew.Seconds()) > 3 {
				t.Errorf("clock_skew_seconds = %v; want about %v", *got, tt.skew.Seconds())
			}
		})
	}
}

// The app's job runner is the one measuring: once an app on PostgreSQL
// has started, the gauge reads its clock's skew (none here: the test's
// server runs on this machine, on its clock).
func TestAnAppOnPostgresReportsItsClockSkewOnceStarted(t *testing.T) {
	clockSkew.Store(nil) // a reading of an earlier test of this process
	a := &App{Postgres: pgtest.DSN(t)}
	if _, err := provisionApp(t, a); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	s := clockSkew.Load()
	if s == nil {
		t.Fatal("no clock skew measured once the app started")
	}
	if s.Abs() > 3*time.Second {
		t.Errorf("clock skew %v; want about none", *s)
	}
}
