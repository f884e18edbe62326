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
	"errors"
	"io"
	"math/big"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
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
	// Over 64 KiB of entries: the lists' and the CRL's lengths take three
	// bytes.
	many := make([]x509.RevocationListEntry, 2000)
	for i := range many {
		many[i] = x509.RevocationListEntry{SerialNumber: new(big.Int).Lsh(big.NewInt(int64(i+1)), 100), RevocationTime: at, ReasonCode: i % 6}
	}
	for _, c := range []struct {
		name    string
		key     crypto.Signer
		entries []x509.RevocationListEntry
	}{
		{"ok/ECDSA P-256", ecKey, entries},
		{"ok/ECDSA P-256, 2,000 entries", ecKey, many},
		{"ok/Ed25519, 2,000 entries", edKey, many},
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
		wantCRL, _ := x509.ParseRevocationList(want)
		// The entries written with the CRL, and the same entries encoded
		// beforehand, as a caller keeping them between CRLs has them.
		header := *tmpl
		header.RevokedCertificateEntries = nil
		var encoded [][]byte
		for _, e := range c.entries {
			der, err := signer.AppendCRLEntry(nil, e)
			if err != nil {
				t.Fatalf("%s: encoding an entry: %v", c.name, err)
			}
			encoded = append(encoded, der)
		}
		for _, way := range []struct {
			name string
			sign func() ([]byte, error)
		}{
			{"written with the CRL", func() ([]byte, error) { return createCRL(rand.Reader, tmpl, ca, c.key) }},
			{"encoded beforehand", func() ([]byte, error) { return createEncodedCRL(rand.Reader, &header, encoded, ca, c.key) }},
		} {
			got, err := way.sign()
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, way.name, err)
			}
			gotCRL, err := x509.ParseRevocationList(got)
			if err != nil {
				t.Fatalf("%s, %s: the CRL does not parse: %v", c.name, way.name, err)
			}
			if !bytes.Equal(gotCRL.RawTBSRevocationList, wantCRL.RawTBSRevocationList) {
				t.Errorf("%s, %s: the to-be-signed CRL differs from x509's\n got %x\nwant %x", c.name, way.name, gotCRL.RawTBSRevocationList, wantCRL.RawTBSRevocationList)
			}
			if err := gotCRL.CheckSignatureFrom(ca); err != nil {
				t.Errorf("%s, %s: the signature does not verify: %v", c.name, way.name, err)
			}
			if gotCRL.SignatureAlgorithm != wantCRL.SignatureAlgorithm {
				t.Errorf("%s, %s: signature algorithm %v; want %v", c.name, way.name, gotCRL.SignatureAlgorithm, wantCRL.SignatureAlgorithm)
			}
			if ed, ok := c.key.(ed25519.PrivateKey); ok && !bytes.Equal(got, want) {
				// Ed25519 signatures are deterministic: the whole CRL is x509's.
				t.Errorf("%s, %s: the CRL differs from x509's (%T)", c.name, way.name, ed)
			}
		}
	}
}

// An entry the encoder cannot write as x509 does (one with extensions of
// its own) is refused, not written differently.
func TestAnEntryWithExtensionsIsNotEncodedAhead(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		entry x509.RevocationListEntry
	}{
		{"refused/an extension", x509.RevocationListEntry{SerialNumber: big.NewInt(1), RevocationTime: at,
			ExtraExtensions: []pkix.Extension{{Id: []int{2, 5, 29, 24}, Value: []byte{0x18, 0}}}}},
		{"refused/no serial", x509.RevocationListEntry{RevocationTime: at}},
		{"refused/no time", x509.RevocationListEntry{SerialNumber: big.NewInt(1)}},
	} {
		if got, err := signer.AppendCRLEntry([]byte{7}, c.entry); !errors.Is(err, signer.ErrCRLEntryNotEncodable) || !bytes.Equal(got, []byte{7}) {
			t.Errorf("%s: %x, %v; want the buffer untouched and ErrCRLEntryNotEncodable", c.name, got, err)
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
	// The same entries encoded beforehand, as the authority keeps those of
	// its last CRL: what a regeneration that adds none signs.
	header := *tmpl
	header.RevokedCertificateEntries = nil
	encoded := make([][]byte, len(entries))
	for i, e := range entries {
		encoded[i], _ = signer.AppendCRLEntry(nil, e)
	}
	for _, c := range []struct {
		name string
		f    func(io.Reader, *x509.RevocationList, *x509.Certificate, crypto.Signer) ([]byte, error)
	}{{"x509", x509.CreateRevocationList}, {"localca", createCRL}, {"localca/encoded", func(rnd io.Reader, tmpl *x509.RevocationList, ca *x509.Certificate, key crypto.Signer) ([]byte, error) {
		return createEncodedCRL(rnd, &header, encoded, ca, key)
	}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.f(rand.Reader, tmpl, ca, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
