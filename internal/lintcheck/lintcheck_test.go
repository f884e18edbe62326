package lintcheck

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps the failures instead of reporting
// them, so a test can check what lintcheck would have said.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// privateLeafLints are what a private CA's leaf raises (see signer/localca).
var privateLeafLints = map[string]string{
	"e_sub_cert_certificate_policies_missing": "private CA: no CA/Browser Forum policy",
	"e_sub_cert_cert_policy_empty":            "private CA: no CA/Browser Forum policy",
	"e_sub_cert_aia_missing":                  "private CA: no OCSP responder, no caIssuers URL",
}

// testPKI returns a leaf a CA issued, a CRL it signed, and one listing
// a serial twice (a zlint warning).
func testPKI(t *testing.T) (leaf, crl, twice []byte) {
	t.Helper()
	now := time.Date(2026, time.October, 1, 12, 0, 0, 0, time.UTC)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test CA", Organization: []string{"lintcheck tests"}},
		NotBefore: now.AddDate(-1, 0, 0), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}, &x509.Certificate{}, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err = x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(0x1234567890abcdef), Subject: pkix.Name{CommonName: "www.example.com"},
		NotBefore: now, NotAfter: now.Add(7*24*time.Hour - time.Second),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, DNSNames: []string{"www.example.com"},
	}, ca, leafKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	crl, err = x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: now, NextUpdate: now.Add(24 * time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: big.NewInt(7), RevocationTime: now.Add(-time.Hour), ReasonCode: 1}},
	}, ca, caKey)
	if err != nil {
		t.Fatal(err)
	}
	entry := x509.RevocationListEntry{SerialNumber: big.NewInt(7), RevocationTime: now.Add(-time.Hour), ReasonCode: 1}
	twice, err = x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(2), ThisUpdate: now, NextUpdate: now.Add(24 * time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{entry, entry},
	}, ca, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return leaf, crl, twice
}

func TestLintcheck(t *testing.T) {
	leaf, crl, twice := testPKI(t)
	tests := []struct {
		name   string
		check  func(testing.TB, []byte, map[string]string)
		der    []byte
		accept map[string]string
		want   []string // a substring of each failure, in order; none when it passes
	}{
		{"ok/a private CA's leaf passes once its lints are accepted", Certificate, leaf, privateLeafLints, nil},
		{"ok/a well-formed CRL passes with nothing accepted", CRL, crl, nil, nil},
		{"fail/a lint that is not accepted fails the test", Certificate, leaf,
			map[string]string{"e_sub_cert_aia_missing": "private CA"},
			[]string{"e_sub_cert_cert_policy_empty", "e_sub_cert_certificate_policies_missing"}},
		{"fail/an accepted lint without a reason fails the test", Certificate, leaf,
			map[string]string{"e_sub_cert_aia_missing": ""}, []string{"e_sub_cert_aia_missing has no justification"}},
		{"fail/an accepted lint zlint does not know fails the test", Certificate, leaf,
			map[string]string{"e_no_such_lint": "typo"}, []string{"e_no_such_lint is not a zlint lint"}},
		{"fail/a certificate lint accepted for a CRL fails the test", CRL, crl,
			map[string]string{"e_sub_cert_aia_missing": "wrong kind"}, []string{"e_sub_cert_aia_missing is not a zlint lint"}},
		{"fail/a CRL zlint warns about fails the test", CRL, twice, nil,
			[]string{"e_crl_unique_revoked_certificate (warn)"}},
		{"ok/a CRL warning accepted with a reason passes", CRL, twice,
			map[string]string{"e_crl_unique_revoked_certificate": "a test of accepting"}, nil},
		{"fail/a certificate that does not parse fails the test", Certificate, []byte("garbage"), nil, []string{"parsing certificate"}},
		{"fail/a CRL that does not parse fails the test", CRL, []byte("garbage"), nil, []string{"parsing CRL"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			tc.check(r, tc.der, tc.accept)
			if len(r.failures) != len(tc.want) {
				t.Fatalf("failures = %q, want %d matching %q", r.failures, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(r.failures[i], w) {
					t.Errorf("failure %d = %q, want it to mention %q", i, r.failures[i], w)
				}
			}
		})
	}
}
