package caddyacmeproxy

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	if err := registerProxyMetrics(reg, db); err != nil {
		t.Fatal(err)
	}
	c := proxyMetrics.rateLimited.WithLabelValues("limits-test", "orders_per_account")
	before := testutil.ToFloat64(c)
	serverMetrics{}.RateLimited("limits-test", "orders_per_account")
	serverMetrics{}.RateLimited("limits-test", "orders_per_account")
	serverMetrics{}.RateLimited("limits-test", "accounts_per_ip")
	if got := testutil.ToFloat64(c) - before; got != 2 {
		t.Fatalf("orders_per_account refusals counted %v; want 2", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "caddy_acme_proxy_rate_limited_total" {
			return
		}
	}
	t.Fatal("caddy_acme_proxy_rate_limited_total is not on the registry")
}
