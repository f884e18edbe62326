package notify

import (
	"net"
	"testing"
)

// Without a configured helo the client names itself as Postfix and
// sendmail do, by the machine's fully qualified name, and otherwise by
// its own address as RFC 5321 has a client without a domain name do.
func TestTheDefaultEHLONameIsTheFullyQualifiedHostNameElseTheAddressLiteral(t *testing.T) {
	v4 := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}
	v6 := &net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 40000}
	tests := []struct {
		name, configured, hostname string
		local                      net.Addr
		want                       string
	}{
		{"the configured name, whatever the host's", "mx-client.example.net", "host.example.com", v4, "mx-client.example.net"},
		{"a fully qualified host name", "", "host.example.com", v4, "host.example.com"},
		{"a fully qualified host name, its root dot dropped", "", "host.example.com.", v4, "host.example.com"},
		{"a bare host name: the IPv4 literal", "", "vm", v4, "[192.0.2.7]"},
		{"a bare host name: the IPv6 literal", "", "vm", v6, "[IPv6:2001:db8::7]"},
		{"localhost: the literal", "", "localhost", v4, "[192.0.2.7]"},
		{"a host name that is no DNS name: the literal", "", "my_host.example.com", v4, "[192.0.2.7]"},
		{"a host name that is an IPv4 address: the literal", "", "192.0.2.9", v4, "[192.0.2.7]"},
		{"no host name: the literal", "", "", v4, "[192.0.2.7]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := heloName(tt.configured, tt.hostname, tt.local); got != tt.want {
				t.Errorf("heloName(%q, %q, %v) = %q; want %q", tt.configured, tt.hostname, tt.local, got, tt.want)
			}
		})
	}
}
