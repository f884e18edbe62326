package caddyacmeproxy

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A refusal by a limit is counted on the config's registry, by profile
// and limit.
func TestRateLimitedRefusalsAreCountedByProfileAndLimit(t *testing.T) {
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "m.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg := prometheus.NewRegistry()
	if err := registerProxyMetrics(reg, db, nil, new(clockSkew)); err != nil {
		t.Fatal(err)
	}
	count := func(limit string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "caddy_acme_proxy_rate_limited_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["profile"] == "limits-test" && labels["limit"] == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	before := count("orders_per_account")
	serverMetrics{}.RateLimited("limits-test", "orders_per_account")
	serverMetrics{}.RateLimited("limits-test", "orders_per_account")
	serverMetrics{}.RateLimited("limits-test", "accounts_per_ip")
	if got := count("orders_per_account") - before; got != 2 {
		t.Fatalf("orders_per_account refusals counted %v; want 2", got)
	}
}
