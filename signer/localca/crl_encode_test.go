package localca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"testing"
	"time"
)

func crlTestCA(t testing.TB, key crypto.Signer) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crl encoder test CA", Organization: []string{"acmeproxy"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca
}

// The CRL encoder must write what x509.CreateRevocationList writes: the
// same to-be-signed bytes for every kind of entry and CA key, a signature
// that verifies, and a CRL that parses to the same list.
func TestTheCRLEncoderMatchesTheStandardLibrarysByteForByte(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	entries := []x509.RevocationListEntry{
		{SerialNumber: big.NewInt(1), RevocationTime: at},                                                            // unspecified: no extension
		{SerialNumber: new(big.Int).Lsh(big.NewInt(0xff), 120), RevocationTime: at.Add(time.Hour), ReasonCode: 1},    // a high bit: a leading zero
		{SerialNumber: big.NewInt(0x7f), RevocationTime: time.Date(2051, 1, 2, 3, 4, 5, 0, time.UTC), ReasonCode: 4}, // GeneralizedTime
		{SerialNumber: big.NewInt(0x80), RevocationTime: at.In(time.FixedZone("CET", 3600)), ReasonCode: 10},         // not UTC
		{SerialNumber: big.NewInt(12345678), RevocationTime: time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC), ReasonCode: 5},
	}
	for _, c := range []struct {
		name    string
		key     crypto.Signer
		entries []x509.RevocationListEntry
	}{
		{"ok/ECDSA P-256", ecKey, entries},
		{"ok/ECDSA P-384", ec384, entries},
		{"ok/RSA", rsaKey, entries},
		{"ok/Ed25519", edKey, entries},
		{"ok/no entries", ecKey, nil},
		{"ok/one entry", ecKey, entries[1:2]},
	} {
		ca := crlTestCA(t, c.key)
		tmpl := &x509.RevocationList{Number: big.NewInt(4242), ThisUpdate: at, NextUpdate: at.Add(24 * time.Hour),
			RevokedCertificateEntries: c.entries}
		want, err := x509.CreateRevocationList(rand.Reader, tmpl, ca, c.key)
		if err != nil {
			t.Fatalf("%s: x509: %v", c.name, err)
		}
		got, err := createCRL(rand.Reader, tmpl, ca, c.key)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantCRL, _ := x509.ParseRevocationList(want)
		gotCRL, err := x509.ParseRevocationList(got)
		if err != nil {
			t.Fatalf("%s: the CRL does not parse: %v", c.name, err)
		}
		if !bytes.Equal(gotCRL.RawTBSRevocationList, wantCRL.RawTBSRevocationList) {
			t.Errorf("%s: the to-be-signed CRL differs from x509's\n got %x\nwant %x", c.name, gotCRL.RawTBSRevocationList, wantCRL.RawTBSRevocationList)
		}
		if err := gotCRL.CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s: the signature does not verify: %v", c.name, err)
		}
		if gotCRL.SignatureAlgorithm != wantCRL.SignatureAlgorithm {
			t.Errorf("%s: signature algorithm %v; want %v", c.name, gotCRL.SignatureAlgorithm, wantCRL.SignatureAlgorithm)
		}
		if ed, ok := c.key.(ed25519.PrivateKey); ok && !bytes.Equal(got, want) {
			// Ed25519 signatures are deterministic: the whole CRL is x509's.
			t.Errorf("%s: the CRL differs from x509's (%T)", c.name, ed)
		}
	}
}

func BenchmarkCRLOf100000Entries(b *testing.B) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := crlTestCA(b, key)
	entries := make([]x509.RevocationListEntry, 100000)
	for i := range entries {
		serial := make([]byte, 16)
		_, _ = rand.Read(serial)
		entries[i] = x509.RevocationListEntry{SerialNumber: new(big.Int).SetBytes(serial),
			RevocationTime: time.Now().UTC().Truncate(time.Second), ReasonCode: 4}
	}
	tmpl := &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: entries}
	for _, c := range []struct {
		name string
		f    func(io.Reader, *x509.RevocationList, *x509.Certificate, crypto.Signer) ([]byte, error)
	}{{"x509", x509.CreateRevocationList}, {"localca", createCRL}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.f(rand.Reader, tmpl, ca, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
