package relay

import (
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
)

func TestAnUpstreamsRateLimitIsTheOrdersNamesOnlyWhenItsDetailNamesThem(t *testing.T) {
	dns := func(names ...string) []vocab.Identifier {
		var ids []vocab.Identifier
		for _, n := range names {
			ids = append(ids, vocab.Identifier{Type: vocab.IdentifierDNS, Value: n})
		}
		return ids
	}
	ip := []vocab.Identifier{{Type: vocab.IdentifierIP, Value: "192.0.2.7"}}
	tests := []struct {
		name   string
		detail string
		ids    []vocab.Identifier
		want   bool
	}{
		{"the exact set of names", "too many certificates (5) already issued for this exact set of identifiers in the last 168h0m0s, retry after 2026-12-12 00:00:00 UTC",
			dns("a.example.com"), true},
		{"the older wording of the exact set", "too many certificates already issued for exact set of domains: a.example.com", dns("a.example.com"), true},
		{"the order's registered domain", `too many certificates (50) already issued for "example.com" in the last 168h0m0s, retry after 2026-12-12 00:00:00 UTC`,
			dns("other.org", "api.example.com"), true},
		{"the order's wildcard under the registered domain", `too many certificates (50) already issued for "example.com" in the last 168h0m0s`, dns("*.example.com"), true},
		{"the order's name, failed authorizations", `too many failed authorizations (5) for "api.example.com" in the last 1h0m0s, retry after 2026-12-12 00:00:00 UTC`,
			dns("API.example.com."), true},
		{"the order's IP range", `too many certificates (50) already issued for "192.0.2.0/24" in the last 168h0m0s`, ip, true},
		{"the order's IP", `too many failed authorizations (5) for "192.0.2.7" in the last 1h0m0s`, ip, true},
		{"another IP range", `too many certificates (50) already issued for "198.51.100.0/24" in the last 168h0m0s`, ip, false},
		{"a name the order does not hold", `too many certificates (50) already issued for "example.org" in the last 168h0m0s`, dns("api.example.com"), false},
		{"a name that only ends like the order's", `too many certificates (50) already issued for "ample.com" in the last 168h0m0s`, dns("example.com"), false},
		{"the account's orders", "too many new orders (300) from this account in the last 3h0m0s, retry after 2026-12-12 00:00:00 UTC", dns("a.example.com"), false},
		{"the IP address's registrations", "too many new registrations (10) from this IP address in the last 3h0m0s", dns("a.example.com"), false},
		{"no detail", "", dns("a.example.com"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := limitsNames(tt.detail, tt.ids); got != tt.want {
				t.Errorf("limitsNames(%q, %v) = %v; want %v", tt.detail, tt.ids, got, tt.want)
			}
		})
	}
}
