package caddyacmeproxy

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The CRL gauge reports the nextUpdate of the CAs whose CRLs the mounted
// profiles keep publishing. An expired CA's CRL stays in the store, no
// longer refreshed, its nextUpdate behind for good: it leaves the gauge,
// so that an alert on a lapsing CRL does not fire for ever after each
// renewal of the CA. When the profiles cannot tell which CAs are in
// service, every CRL is reported.
func TestTheCRLGaugeReportsOnlyCAsInServiceNotAnExpiredCAsStaleCRL(t *testing.T) {
	const current, expired = "aa11", "bb22"
	now := time.Now()
	tests := []struct {
		name      string
		inService func(context.Context) (map[string]bool, error)
		want      []string
	}{
		{name: "ok/the current CA in service, the expired one left out",
			inService: func(context.Context) (map[string]bool, error) { return map[string]bool{current: true}, nil },
			want:      []string{current}},
		{name: "ok/both in service (the old CA not expired yet)",
			inService: func(context.Context) (map[string]bool, error) {
				return map[string]bool{current: true, expired: true}, nil
			},
			want: []string{current, expired}},
		{name: "ok/no profile publishing a CRL here reports none",
			inService: func(context.Context) (map[string]bool, error) { return map[string]bool{}, nil },
			want:      nil},
		{name: "ok/a profile that cannot tell reports every CRL",
			inService: func(context.Context) (map[string]bool, error) {
				return map[string]bool{current: true}, errors.New("the CA's storage is away")
			},
			want: []string{current, expired}},
	}
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "m.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		issuer string
		at     time.Time
	}{{expired, now.Add(-30 * 24 * time.Hour)}, {current, now}} {
		if _, err := db.PublishCRL(context.Background(), c.issuer, "name-"+c.issuer, c.at, func(int64, []store.CRLEntry) ([]byte, time.Time, time.Time, error) {
			return []byte("crl of " + c.issuer), c.at, c.at.Add(24 * time.Hour), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if err := registerProxyMetrics(reg, db, tt.inService, new(clockSkew)); err != nil {
				t.Fatal(err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, mf := range mfs {
				if mf.GetName() != "caddy_acme_proxy_crl_next_update_timestamp_seconds" {
					continue
				}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "issuer" {
							got = append(got, l.GetValue())
						}
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("the gauge reports issuers %v, want %v", got, tt.want)
			}
		})
	}
}
