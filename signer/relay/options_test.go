package relay

import "testing"

// A resolver is checked as certmagic dials it (host[:port], port 53 when
// left out, a host name resolved by the system): what it could dial
// passes, what it could not fails at load.
func TestAResolverAddressIsTakenAsTheDNS01SolverDialsIt(t *testing.T) {
	tests := []struct {
		name  string
		addr  string
		valid bool
	}{
		{"ok/an IPv4 address", "10.0.0.53", true},
		{"ok/an IPv4 address and port", "10.0.0.53:5353", true},
		{"ok/a bare IPv6 address", "2001:db8::53", true},
		{"ok/an IPv6 address and port", "[2001:db8::53]:53", true},
		{"ok/a host name", "ns1.example.com", true},
		{"ok/a host name and port", "ns1.example.com:53", true},
		{"fail/two addresses in one", "10.0.0.53 10.0.0.54", false},
		{"fail/a port above 65535", "10.0.0.53:99999", false},
		{"fail/port 0", "10.0.0.53:0", false},
		{"fail/an empty host", ":53", false},
		{"fail/a URL", "https://1.1.1.1/dns-query", false},
		{"fail/empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if problem := resolverProblem(tt.addr); (problem == "") != tt.valid {
				t.Errorf("resolverProblem(%q) = %q; want valid %v", tt.addr, problem, tt.valid)
			}
		})
	}
}
