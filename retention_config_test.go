package caddyacmeproxy

import (
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

func TestRetentionSettingsDefaultToAMonthForOrdersAndAQuarterForCertificates(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name, key, value string
		def              time.Duration
		want             time.Duration
		err              string
	}{
		{"ok/orders by default", "order_retention", "", acmeproxy.DefaultOrderRetention, 30 * day, ""},
		{"ok/certificates by default", "certificate_retention", "", acmeproxy.DefaultCertificateRetention, 90 * day, ""},
		{"ok/in days", "order_retention", "7d", acmeproxy.DefaultOrderRetention, 7 * day, ""},
		{"ok/keep", "certificate_retention", "keep", acmeproxy.DefaultCertificateRetention, 0, ""},
		{"fail/not a duration", "order_retention", "soon", acmeproxy.DefaultOrderRetention, 0, `order_retention: "soon" is not a duration or "keep"`},
		{"fail/zero", "certificate_retention", "0s", acmeproxy.DefaultCertificateRetention, 0, `certificate_retention: "0s" must be positive`},
		{"ok/certificates a day past their expiry", "certificate_retention", "1d", acmeproxy.DefaultCertificateRetention, day, ""},
		{"fail/certificates pruned while still on a CRL", "certificate_retention", "12h", acmeproxy.DefaultCertificateRetention, 0,
			`certificate_retention: "12h" is shorter than 24h, which a revoked certificate stays on the CRLs past its notAfter`},
		{"ok/orders of an hour", "order_retention", "1h", acmeproxy.DefaultOrderRetention, time.Hour, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			least := time.Duration(0)
			if tt.key == "certificate_retention" {
				least = authority.CRLKeepsExpired
			}
			got, err := parseRetention(tt.key, tt.value, tt.def, least)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("%s %q: %v; want an error containing %q", tt.key, tt.value, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("%s %q: %s, %v; want %s", tt.key, tt.value, got, err, tt.want)
			}
		})
	}
}
