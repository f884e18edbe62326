package authority

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// A CSR must name the order's identifiers each in the SAN of its type
// (RFC 8555 §7.4, RFC 5280 §4.2.1.6): an IP address written as a dNSName is a
// DNS name no order has, and a relay or script backend would refuse the
// CSR after the order was claimed.
func TestACSRNamesEachIdentifierInTheSANOfItsType(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	order := []acme.Identifier{
		{Type: acme.IdentifierDNS, Value: "a.example.com"},
		{Type: acme.IdentifierIP, Value: "192.0.2.1"},
		{Type: acme.IdentifierIP, Value: "2001:db8::1"},
	}
	ips := func(s ...string) []net.IP {
		out := make([]net.IP, len(s))
		for i, v := range s {
			out[i] = net.ParseIP(v)
		}
		return out
	}
	tests := []struct {
		name   string
		cn     string
		dns    []string
		ips    []net.IP
		wantOK bool
	}{
		{name: "each name in its own SAN is accepted", dns: []string{"a.example.com"}, ips: ips("192.0.2.1", "2001:db8::1"), wantOK: true},
		{name: "an IP address as the common name is accepted", cn: "192.0.2.1", dns: []string{"a.example.com"}, ips: ips("192.0.2.1", "2001:db8::1"), wantOK: true},
		{name: "a DNS name as the common name is accepted", cn: "A.example.com", dns: []string{"a.example.com"}, ips: ips("192.0.2.1", "2001:db8::1"), wantOK: true},
		{name: "an IPv4 address written as a dNSName is refused", dns: []string{"a.example.com", "192.0.2.1"}, ips: ips("2001:db8::1")},
		{name: "an IPv6 address written as a dNSName is refused", dns: []string{"a.example.com", "2001:db8::1"}, ips: ips("192.0.2.1")},
		{name: "an IP address as a dNSName beside its iPAddress is refused", dns: []string{"a.example.com", "192.0.2.1"}, ips: ips("192.0.2.1", "2001:db8::1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
				Subject: pkix.Name{CommonName: tc.cn}, DNSNames: tc.dns, IPAddresses: tc.ips}, key)
			if err != nil {
				t.Fatal(err)
			}
			csr, err := x509.ParseCertificateRequest(der)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckCSR(csr, order, nil)
			switch p, isProblem := problem.As(err); {
			case tc.wantOK && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.wantOK && err == nil:
				t.Fatal("accepted")
			case !tc.wantOK && (!isProblem || p.Type != acme.ErrorBadCSR):
				t.Fatalf("refused with %v; want a badCSR problem", err)
			}
		})
	}
}
