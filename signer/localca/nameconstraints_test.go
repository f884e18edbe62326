package localca

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// constrainedCA is an issuing CA whose certificates carry name
// constraints (RFC 5280 §4.2.1.10), as an enterprise's intermediate
// imported from files often does: DNS constraints on the intermediate, IP
// constraints on the root, so that both levels of the chain count.
func constrainedCA(t *testing.T) *testCA {
	t.Helper()
	_, v4, _ := net.ParseCIDR("10.0.0.0/8")
	_, v4out, _ := net.ParseCIDR("10.66.0.0/16")
	ca := &testCA{rootKey: newKey(t, "p256"), interKey: newKey(t, "p256")}
	ca.root = createCert(t, &x509.Certificate{
		Subject:   pkix.Name{CommonName: "Constrained Root"},
		NotBefore: testNow.AddDate(-2, 0, 0), NotAfter: testNow.AddDate(2, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true,
		PermittedIPRanges: []*net.IPNet{v4},
		ExcludedIPRanges:  []*net.IPNet{v4out},
	}, nil, ca.rootKey.Public(), ca.rootKey)
	ca.inter = createCert(t, &x509.Certificate{
		Subject:   pkix.Name{CommonName: "Constrained Intermediate"},
		NotBefore: testNow.AddDate(-1, 0, 0), NotAfter: testNow.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		PermittedDNSDomains: []string{".internal.example.com", "example.net"},
		ExcludedDNSDomains:  []string{"secret.internal.example.com"},
	}, ca.root, ca.interKey.Public(), ca.rootKey)
	return ca
}

// goVerifies reports whether Go's own verifier accepts a leaf for id
// signed by ca's intermediate: what a client using crypto/x509 would make
// of the leaf this CA would issue for id.
func (ca *testCA) goVerifies(t *testing.T, id acme.Identifier) bool {
	t.Helper()
	tmpl := &x509.Certificate{NotBefore: testNow.Add(-backdate), NotAfter: testNow.Add(DefaultLifetime),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	if id.Type == acme.IdentifierIP {
		tmpl.IPAddresses = []net.IP{net.ParseIP(id.Value)}
	} else {
		tmpl.DNSNames = []string{id.Value}
	}
	leaf := createCert(t, tmpl, ca.inter, newKey(t, "p256").Public(), ca.interKey)
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(ca.root)
	inters.AddCert(ca.inter)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: testNow,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// A leaf for a name its CA's name constraints forbid is rejected by every
// client that checks them, far from its cause: the local CA refuses the
// name instead, at newOrder (CheckIdentifier) and again at signing (the
// issuing CA may have changed in between). Each case is checked against
// Go's own verifier too, so that the refusals are exactly the leaves a
// client would reject.
func TestANameOutsideTheIssuingCAsNameConstraintsIsRejected(t *testing.T) {
	ca := constrainedCA(t)
	s := newSigner(t, ca.source(), Options{})
	tests := []struct {
		name string
		id   acme.Identifier
		ok   bool
	}{
		{"ok/a name below a domain its CA permits only subdomains of", dns("www.internal.example.com"), true},
		{"ok/a wildcard below a permitted domain", dns("*.b.example.net"), true},
		{"fail/a wildcard whose names include an excluded one", dns("*.internal.example.com"), false},
		{"ok/a domain its CA permits, itself", dns("example.net"), true},
		{"ok/a name below a domain its CA permits with its subdomains", dns("a.b.example.net"), true},
		{"ok/a name of another case than the constraint", dns("WWW.Internal.Example.COM"), true},
		{"ok/an address in a range its root permits", ip("10.1.2.3"), true},
		{"fail/a name outside every permitted domain", dns("www.example.org"), false},
		{"fail/a name that only ends with a permitted domain's text", dns("badexample.net"), false},
		{"fail/the domain itself when only its subdomains are permitted", dns("internal.example.com"), false},
		{"fail/an excluded name", dns("secret.internal.example.com"), false},
		{"fail/a name below an excluded name", dns("db.secret.internal.example.com"), false},
		{"fail/an address outside the permitted ranges", ip("192.0.2.1"), false},
		{"fail/an address in an excluded range", ip("10.66.1.1"), false},
		{"fail/an IPv6 address when only IPv4 ranges are permitted", ip("2001:db8::1"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ca.goVerifies(t, tc.id); got != tc.ok {
				t.Fatalf("Go's verifier accepts a leaf for %s: %v; the case expects %v", tc.id.Value, got, tc.ok)
			}
			checkErr := s.CheckIdentifier(tc.id)
			_, issueErr := s.Issue(t.Context(), issueRequest(t, newKey(t, "p256"), tc.id))
			for what, err := range map[string]error{"CheckIdentifier": checkErr, "Issue": issueErr} {
				if tc.ok {
					if err != nil {
						t.Errorf("%s: %v; want the name accepted", what, err)
					}
					continue
				}
				e, ok := signer.AsError(err)
				if !ok || e.Kind != signer.KindRejectedIdentifier {
					t.Errorf("%s: %v; want a *signer.Error of kind rejected identifier", what, err)
					continue
				}
				if !strings.Contains(e.Detail, "name constraints") {
					t.Errorf("%s detail %q does not say the CA's name constraints refuse it", what, e.Detail)
				}
			}
		})
	}
}

// A CA without name constraints, the usual case, issues for any name.
func TestAnUnconstrainedCAAcceptsEveryName(t *testing.T) {
	s := newSigner(t, defaultCA(t).source(), Options{})
	for _, id := range []acme.Identifier{dns("www.example.org"), dns("*.example.com"), ip("192.0.2.1"), ip("2001:db8::1")} {
		if err := s.CheckIdentifier(id); err != nil {
			t.Errorf("CheckIdentifier(%s): %v", id.Value, err)
		}
	}
}
