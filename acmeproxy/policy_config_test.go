package acmeproxy

import (
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// A policy that can never let an order through is a mistake the operator
// hears about at load, not from every client's refused order.
func TestAPolicyNoIdentifierCouldPassIsRefusedAtLoadNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		cfg  ProfileConfig
		want string
	}{
		{"fail/an allow listing nothing", ProfileConfig{Profile: "p", Allow: &IdentifierPolicy{}},
			"allow: lists no domains and no ip_ranges"},
		{"fail/IP ranges allowed with only dns-01", ProfileConfig{Profile: "p", Challenges: []string{acme.ChallengeDNS01},
			Allow: &IdentifierPolicy{IPRanges: []string{"10.0.0.0/8"}}},
			"allow.ip_ranges: an IP address is validated by http-01 or tls-alpn-01"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.SetDefaults()
			if err := tc.cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error starting %q", err, tc.want)
			}
		})
	}
}

func TestAPolicyWhoseIdentifiersCanPassLoads(t *testing.T) {
	for _, cfg := range []ProfileConfig{
		{Profile: "p", Challenges: []string{acme.ChallengeDNS01}, Allow: &IdentifierPolicy{Domains: []string{"*.example.com"}}},
		{Profile: "p", Challenges: []string{acme.ChallengeTLSALPN01}, Allow: &IdentifierPolicy{IPRanges: []string{"10.0.0.0/8"}}},
		{Profile: "p", Challenges: []string{acme.ChallengeDNS01}, Deny: &IdentifierPolicy{IPRanges: []string{"10.0.0.0/8"}}},
	} {
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: %v; want it to load", cfg, err)
		}
	}
}
