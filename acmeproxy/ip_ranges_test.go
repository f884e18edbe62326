package acmeproxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// Identifiers are matched unmapped, so an IPv4-mapped IPv6 range in
// ip_ranges is unmapped when the policy loads: left as written it would
// match nothing, and a deny written that way would refuse nothing.
func TestAnIPv4MappedRangeInAPolicyMatchesTheIPv4AddressesItMaps(t *testing.T) {
	tests := []struct {
		name    string
		deny    []string
		refused []string
		allowed []string
	}{
		{name: "a mapped /104 denies the IPv4 /8", deny: []string{"::ffff:10.0.0.0/104"},
			refused: []string{"10.1.2.3", "::ffff:10.1.2.3", "10.255.255.255"}, allowed: []string{"11.0.0.1", "192.0.2.1", "2001:db8::1"}},
		{name: "a mapped address denies the IPv4 address", deny: []string{"::ffff:192.0.2.7"},
			refused: []string{"192.0.2.7"}, allowed: []string{"192.0.2.8"}},
		{name: "a mapped /128 denies the IPv4 address", deny: []string{"::ffff:192.0.2.7/128"},
			refused: []string{"192.0.2.7"}, allowed: []string{"192.0.2.6"}},
		{name: "a mapped range written unmasked is masked", deny: []string{"::ffff:10.9.9.9/104"},
			refused: []string{"10.1.2.3"}, allowed: []string{"11.9.9.9"}},
		{name: "the mapped /96 denies every IPv4 address", deny: []string{"::ffff:0.0.0.0/96"},
			refused: []string{"1.0.0.1", "203.0.113.9", "255.255.255.254"}, allowed: []string{"2001:db8::1", "::1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deny := &IdentifierPolicy{IPRanges: tc.deny}
			if err := deny.validate(); err != nil {
				t.Fatalf("policy refused at load: %v", err)
			}
			p := newPolicy(nil, deny)
			check := func(v string) *problem.Problem {
				id, _, prob := normalizeIdentifier(ipIdent(v))
				if prob != nil {
					t.Fatalf("test identifier %q does not normalize: %s", v, prob)
				}
				return p.check(id)
			}
			for _, v := range tc.refused {
				if check(v) == nil {
					t.Errorf("%s allowed, want denied", v)
				}
			}
			for _, v := range tc.allowed {
				if prob := check(v); prob != nil {
					t.Errorf("%s denied: %s", v, prob.Detail)
				}
			}
		})
	}
}

// A mapped range shorter than /96 reaches past the mapped addresses and
// has no IPv4 equivalent: the configuration is refused, naming the key.
func TestAnIPv4MappedRangeShorterThanA96IsRefusedNamingIPRanges(t *testing.T) {
	tests := []struct {
		name string
		cfg  ProfileConfig
		key  string
	}{
		{"fail/deny of a mapped /80", ProfileConfig{Profile: "p", Deny: &IdentifierPolicy{IPRanges: []string{"::ffff:10.0.0.0/80"}}}, "deny.ip_ranges"},
		{"fail/allow of a mapped /95", ProfileConfig{Profile: "p", Allow: &IdentifierPolicy{IPRanges: []string{"10.0.0.0/8", "::ffff:0.0.0.0/95"}}}, "allow.ip_ranges"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.SetDefaults()
			err := tc.cfg.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), tc.key+": ") || !strings.Contains(err.Error(), "IPv4-mapped") {
				t.Fatalf("got %v, want an error naming %s and the mapped range", err, tc.key)
			}
		})
	}
}

func TestADenyOfAnIPv4MappedRangeRefusesTheIPv4AddressAtNewOrder(t *testing.T) {
	e := newTestEnv(t, func(c *ProfileConfig) {
		c.Deny = &IdentifierPolicy{IPRanges: []string{"::ffff:10.0.0.0/104"}}
	})
	alice := e.rawClient()
	alice.register()
	r := alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{ipID("10.1.2.3")}}, jwsOpts{})
	if r.status != http.StatusBadRequest || r.problem == nil {
		t.Fatalf("got %d %s, want a 400 problem", r.status, r.body)
	}
	if len(r.problem.Subproblems) != 1 || r.problem.Subproblems[0].Type != acme.ErrorRejectedIdentifier ||
		r.problem.Subproblems[0].Identifier == nil || r.problem.Subproblems[0].Identifier.Value != "10.1.2.3" {
		t.Fatalf("got %s, want one rejectedIdentifier subproblem for 10.1.2.3", r.body)
	}
	r = alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{ipID("11.1.2.3")}}, jwsOpts{})
	if r.status != http.StatusCreated {
		t.Fatalf("an address outside the deny: %d %s", r.status, r.body)
	}
}
