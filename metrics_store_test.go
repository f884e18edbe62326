package caddyacmeproxy

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A scrape while the database cannot be read (a PostgreSQL restarting, a
// network away) still serves every other metric — the requests answered
// 503 meanwhile among them — and leaves out only the gauges read from the
// store: Caddy's /metrics answers the whole registry, and one collector's
// error would fail all of it.
func TestAScrapeWhileTheStoreCannotBeReadServesEveryOtherMetric(t *testing.T) {
	tests := []struct {
		name      string
		closeDB   bool
		wantGauge bool
	}{
		{name: "ok/the store readable: the gauges are there", closeDB: false, wantGauge: true},
		{name: "ok/the store unreadable: the gauges are left out, the rest served", closeDB: true, wantGauge: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "m.db"), store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			reg := prometheus.NewRegistry()
			if err := registerProxyMetrics(reg, db, nil, new(clockSkew)); err != nil {
				t.Fatal(err)
			}
			serverMetrics{}.Issued("scrape-test")
			if tt.closeDB {
				db.Close()
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatalf("the scrape failed: %v", err)
			}
			names := map[string]bool{}
			for _, mf := range mfs {
				names[mf.GetName()] = true
			}
			if !names["caddy_acme_proxy_certificates_issued_total"] {
				t.Errorf("the scrape lacks certificates_issued_total: %v", names)
			}
			if got := names["caddy_acme_proxy_used_nonces"]; got != tt.wantGauge {
				t.Errorf("used_nonces in the scrape: %v, want %v", got, tt.wantGauge)
			}
		})
	}
}
