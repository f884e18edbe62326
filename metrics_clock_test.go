package caddyacmeproxy

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

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
			skew := new(clockSkew)
			reg := prometheus.NewRegistry()
			if err := registerProxyMetrics(reg, db, nil, skew); err != nil {
				t.Fatal(err)
			}
			// The fake clock stands still: by the time it is read it is
			// behind the skew by the test's own time, a fraction of a second.
			r, err := jobs.NewRunner(jobs.NewQueue(db, nil), nil, jobs.RunnerOptions{Clock: clocktest.New(time.Now().Add(tt.skew)),
				OnClockReading: skew.observe})
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
	a := &App{Postgres: pgtest.DSN(t)}
	if _, err := provisionApp(t, a); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	s := a.clockSkew.last.Load()
	if s == nil {
		t.Fatal("no clock skew measured once the app started")
	}
	if s.Abs() > 3*time.Second {
		t.Errorf("clock skew %v; want about none", *s)
	}
}

// A reload from PostgreSQL onto SQLite takes the gauge away: the new
// config's app has no server clock to compare with, and its scrape does
// not go on reporting the skew the old config's runner measured — not
// while both run (a reload starts the new app before it stops the old),
// nor once the old one stopped.
func TestAReloadFromPostgresOntoSQLiteTakesTheClockSkewGaugeAway(t *testing.T) {
	gauge := func(t *testing.T, reg *prometheus.Registry) bool {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "caddy_acme_proxy_clock_skew_seconds" {
				return true
			}
		}
		return false
	}
	load := func(t *testing.T, a *App) *prometheus.Registry {
		t.Helper()
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		if err := a.provision(ctx, zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Cleanup() })
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		return ctx.GetMetricsRegistry()
	}
	old := &App{Postgres: pgtest.DSN(t)}
	oldReg := load(t, old)
	if !gauge(t, oldReg) {
		t.Fatal("no clock_skew_seconds in the scrape of the app on PostgreSQL")
	}
	cur := &App{}
	cur.Database = filepath.Join(t.TempDir(), "reloaded.db")
	reg := load(t, cur)
	if gauge(t, reg) {
		t.Error("clock_skew_seconds in the scrape of the config reloaded onto SQLite while the old one stops; want none")
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	if gauge(t, reg) {
		t.Error("clock_skew_seconds in the scrape of the config reloaded onto SQLite; want none")
	}
	if err := cur.Stop(); err != nil {
		t.Fatal(err)
	}
}
