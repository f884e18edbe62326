package authority

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"net"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
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

// csrWithKey is a CSR for names whose public key is pub and whose
// signature is junk of the length pub's signatures have: what a client
// that holds no private key can send.
func csrWithKey(t *testing.T, pub *rsa.PublicKey, names []string) []byte {
	t.Helper()
	type pkInfo struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	type tbs struct {
		Version    int
		Subject    asn1.RawValue
		PublicKey  pkInfo
		Attributes []asn1.RawValue `asn1:"tag:0"`
	}
	type csr struct {
		TBS       tbs
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, k)
	if err != nil {
		t.Fatal(err)
	}
	var c csr
	if _, err := asn1.Unmarshal(der, &c); err != nil {
		t.Fatal(err)
	}
	pk := x509.MarshalPKCS1PublicKey(pub)
	c.TBS.PublicKey = pkInfo{Algorithm: pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}, Parameters: asn1.NullRawValue},
		PublicKey: asn1.BitString{Bytes: pk, BitLength: 8 * len(pk)}}
	c.Algorithm = pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}, Parameters: asn1.NullRawValue} // sha256WithRSAEncryption
	sig := make([]byte, (pub.N.BitLen()+7)/8)
	sig[len(sig)-1] = 2
	c.Signature = asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}
	out, err := asn1.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Verifying an RSA signature costs the square of the modulus's size, and
// the largest CSR a finalize carries holds a modulus of about 140,000
// bits: a second of CPU to verify, on every finalize of one ready order,
// for a key the policy refuses anyway. The key is refused first, for what
// it is, and its signature never verified.
func TestACSRKeyThePolicyRefusesIsRefusedBeforeItsSignatureIsVerified(t *testing.T) {
	order := []acme.Identifier{{Type: acme.IdentifierDNS, Value: "a.example.com"}}
	modulus := func(bits int) *big.Int {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
		if err != nil {
			t.Fatal(err)
		}
		return n.SetBit(n, bits-1, 1).SetBit(n, 0, 1)
	}
	tests := []struct {
		name       string
		key        *rsa.PublicKey
		wantDetail string
	}{
		{"fail/an RSA key one bit over the policy", &rsa.PublicKey{N: modulus(8193), E: 65537}, "not 8193"},
		{"fail/the largest RSA key a request carries", &rsa.PublicKey{N: modulus(140000), E: 1<<31 - 1}, "not 140000"},
		{"fail/an RSA key under the policy", &rsa.PublicKey{N: modulus(1024), E: 65537}, "not 1024"},
		{"fail/a key the policy takes, with a junk signature", &rsa.PublicKey{N: modulus(2048), E: 65537}, "signature does not verify"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := x509.ParseCertificateRequest(csrWithKey(t, tc.key, []string{"a.example.com"}))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckCSR(csr, order, nil)
			p, ok := problem.As(err)
			if !ok || p.Type != acme.ErrorBadCSR || !strings.Contains(p.Detail, tc.wantDetail) {
				t.Fatalf("refused with %v; want badCSR saying %q", err, tc.wantDetail)
			}
		})
	}
}

// A signer's refusal is the problem of its kind, with the HTTP status a
// finalize answers that type with, and its detail: the signer's own, or,
// for a refusal reported later without one, a generic detail that sends
// the client to the operator. KindUnavailable is no refusal.
func TestASignersRefusalIsTheProblemOfItsKindWithItsStatus(t *testing.T) {
	tests := []struct {
		name       string
		kind       signer.Kind
		wantType   acme.ProblemType
		wantStatus int
		// wantGeneric is the detail of a refusal without one, reported
		// later.
		wantGeneric string
	}{
		{"bad CSR", signer.KindBadCSR, acme.ErrorBadCSR, 400, "the signer refused the CSR; the operator can see why"},
		{"rejected identifier", signer.KindRejectedIdentifier, acme.ErrorRejectedIdentifier, 400, "the signer refused to issue for this order's identifiers; the operator can see why"},
		{"bad validity", signer.KindBadValidity, acme.ErrorMalformed, 400, "the signer refused the order's notBefore and notAfter; the operator can see why"},
		{"rate limited", signer.KindRateLimited, acme.ErrorRateLimited, 429, "the upstream CA rate-limited this order's identifiers; try again later; the operator can see why"},
		{"CAA", signer.KindCAA, acme.ErrorCAA, 403, "the CAA records of this order's identifiers forbid its issuance; the operator can see why"},
		{"DNS", signer.KindDNS, acme.ErrorDNS, 400, "the DNS of this order's identifiers failed their validation; the operator can see why"},
		{"connection", signer.KindConnection, acme.ErrorConnection, 400, "their validation could not connect to this order's identifiers; the operator can see why"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				detail     string
				generic    bool
				wantDetail string
			}{
				{"the signer's words", false, "the signer's words"},
				{"the signer's words", true, "the signer's words"},
				{"", false, ""},
				{"", true, tc.wantGeneric},
			} {
				p := refusalProblem(&signer.Error{Kind: tc.kind, Detail: c.detail}, c.generic)
				if p == nil {
					t.Fatalf("no problem for the refusal %+v", c)
				}
				if p.Type != tc.wantType || p.Status != tc.wantStatus || p.Detail != c.wantDetail {
					t.Errorf("refusal %q (generic %v) is %s %d %q; want %s %d %q", c.detail, c.generic,
						p.Type, p.Status, p.Detail, tc.wantType, tc.wantStatus, c.wantDetail)
				}
				if p.Identifier != nil || p.Subproblems != nil {
					t.Errorf("a refusal without subproblems has an identifier or subproblems: %+v", p)
				}
			}
		})
	}
	if p := refusalProblem(&signer.Error{Kind: signer.KindUnavailable, Detail: "down"}, true); p != nil {
		t.Errorf("an unavailable signer is the refusal %+v; want none", p)
	}
}

// A signer's refusal about some of the order's identifiers is the
// problem of its kind with a subproblem for each (RFC 8555 §6.7.1): the
// subproblem's own type and detail, its identifier, and no HTTP status;
// a refusal of several kinds is compound.
func TestASignersRefusalAboutSomeIdentifiersCarriesASubproblemForEach(t *testing.T) {
	a := acme.Identifier{Type: acme.IdentifierDNS, Value: "a.example.com"}
	b := acme.Identifier{Type: acme.IdentifierIP, Value: "192.0.2.7"}
	tests := []struct {
		name       string
		refusal    signer.Error
		wantType   acme.ProblemType
		wantStatus int
		wantSubs   []problem.Problem
	}{
		{"ok/CAA refusals of two identifiers", signer.Error{Kind: signer.KindCAA, Detail: "the upstream CA refused: CAA", Subproblems: []signer.Subproblem{
			{Kind: signer.KindCAA, Detail: "CAA record for a.example.com prevents issuance", Identifier: a},
			{Kind: signer.KindCAA, Detail: "CAA record for 192.0.2.7 prevents issuance", Identifier: b}}},
			acme.ErrorCAA, 403, []problem.Problem{
				{Type: acme.ErrorCAA, Detail: "CAA record for a.example.com prevents issuance", Identifier: &a},
				{Type: acme.ErrorCAA, Detail: "CAA record for 192.0.2.7 prevents issuance", Identifier: &b}}},
		{"ok/refusals of different kinds are compound", signer.Error{Kind: signer.KindCompound, Detail: "the upstream CA refused: 2 failed", Subproblems: []signer.Subproblem{
			{Kind: signer.KindCAA, Detail: "CAA forbids", Identifier: a},
			{Kind: signer.KindDNS, Detail: "SERVFAIL", Identifier: b},
			{Kind: signer.KindUnavailable, Detail: "no refusal", Identifier: b}}},
			acme.ErrorCompound, 400, []problem.Problem{
				{Type: acme.ErrorCAA, Detail: "CAA forbids", Identifier: &a},
				{Type: acme.ErrorDNS, Detail: "SERVFAIL", Identifier: &b}}},
		{"ok/a refused name", signer.Error{Kind: signer.KindRejectedIdentifier, Subproblems: []signer.Subproblem{
			{Kind: signer.KindRejectedIdentifier, Detail: "a.example.com is a forbidden domain", Identifier: a}}},
			acme.ErrorRejectedIdentifier, 400, []problem.Problem{
				{Type: acme.ErrorRejectedIdentifier, Detail: "a.example.com is a forbidden domain", Identifier: &a}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := refusalProblem(&tc.refusal, true)
			if p == nil || p.Type != tc.wantType || p.Status != tc.wantStatus || p.Identifier != nil {
				t.Fatalf("the refusal is %+v; want %s %d about no identifier", p, tc.wantType, tc.wantStatus)
			}
			if len(p.Subproblems) != len(tc.wantSubs) {
				t.Fatalf("%d subproblems %+v; want %d", len(p.Subproblems), p.Subproblems, len(tc.wantSubs))
			}
			for i, sp := range p.Subproblems {
				w := tc.wantSubs[i]
				if sp.Type != w.Type || sp.Detail != w.Detail || sp.Status != 0 || sp.Identifier == nil || *sp.Identifier != *w.Identifier || sp.Subproblems != nil {
					t.Errorf("subproblem %d is %+v (about %v); want %s %q about %v, without a status", i, sp, sp.Identifier, w.Type, w.Detail, *w.Identifier)
				}
			}
		})
	}
}
