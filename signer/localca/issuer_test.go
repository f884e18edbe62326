package localca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func certsPEM(certs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		b.Write(pemBlock("CERTIFICATE", c.Raw))
	}
	return b.Bytes()
}

func pkcs8PEM(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("MarshalPKCS8PrivateKey: %v", err)
	}
	return pemBlock("PRIVATE KEY", der)
}

func TestFromPEMFiles(t *testing.T) {
	ca := defaultCA(t)
	nb, na := testNow.AddDate(-1, 0, 0), testNow.AddDate(1, 0, 0)

	sec1, err := x509.MarshalECPrivateKey(ca.interKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	rsaKey := newKey(t, "rsa2048")
	rsaInter := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "Test RSA Intermediate"}, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}, ca.root, rsaKey.Public(), ca.rootKey)
	leafKey := newKey(t, "p256")
	notCA := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "not a CA"}, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageDigitalSignature,
	}, ca.inter, leafKey.Public(), ca.interKey)
	noCertSign := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "CA without keyCertSign"}, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}, ca.root, leafKey.Public(), ca.rootKey)
	noCRLSign := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "CA without cRLSign"}, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}, ca.root, leafKey.Public(), ca.rootKey)
	// crypto/x509 gives every CA it creates a subject key identifier;
	// basicConstraints written by hand keep it from knowing this is one.
	caTrue, err := asn1.Marshal(struct{ IsCA bool }{true})
	if err != nil {
		t.Fatal(err)
	}
	noSKI := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "CA without a subject key identifier"}, NotBefore: nb, NotAfter: na,
		KeyUsage:        x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: caTrue}},
	}, ca.root, leafKey.Public(), ca.rootKey)
	if !noSKI.IsCA || len(noSKI.SubjectKeyId) != 0 {
		t.Fatalf("test CA: cA %v, subject key id %x; want a CA without one", noSKI.IsCA, noSKI.SubjectKeyId)
	}
	interKeyPEM := pkcs8PEM(t, ca.interKey)

	const (
		certAtFault = "cert"
		keyAtFault  = "key"
	)
	tests := []struct {
		name      string
		cert, key []byte // file contents; nil: the file does not exist
		wantLen   int    // certificates in the chain, when it loads
		atFault   string // the file the error must name
		wantErr   string // and what else it must say
	}{
		{name: "ok/intermediate and root with a PKCS #8 key",
			cert: certsPEM(ca.inter, ca.root), key: interKeyPEM, wantLen: 2},
		{name: "ok/intermediate alone with an SEC 1 key after EC PARAMETERS",
			cert: certsPEM(ca.inter), key: append(pemBlock("EC PARAMETERS", []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}), pemBlock("EC PRIVATE KEY", sec1)...), wantLen: 1},
		{name: "ok/an RSA intermediate with a PKCS #1 key",
			cert: certsPEM(rsaInter, ca.root), key: pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey.(*rsa.PrivateKey))), wantLen: 2},
		{name: "fail/a missing cert file is named",
			cert: nil, key: interKeyPEM, atFault: certAtFault},
		{name: "fail/a missing key file is named",
			cert: certsPEM(ca.inter), key: nil, atFault: keyAtFault},
		{name: "fail/a cert file without PEM is named",
			cert: []byte("this is not PEM\n"), key: interKeyPEM, atFault: certAtFault},
		{name: "fail/a cert file with a corrupt certificate is named",
			cert: pemBlock("CERTIFICATE", []byte("garbage")), key: interKeyPEM, atFault: certAtFault},
		{name: "fail/a cert file whose chain is out of order is named",
			cert: certsPEM(ca.root, ca.inter), key: interKeyPEM, atFault: certAtFault},
		{name: "fail/a certificate that is not a CA is refused",
			cert: certsPEM(notCA), key: pkcs8PEM(t, leafKey), atFault: certAtFault},
		{name: "fail/a CA that may not sign certificates is refused",
			cert: certsPEM(noCertSign), key: pkcs8PEM(t, leafKey), atFault: certAtFault},
		{name: "fail/a CA that may not sign the CRL of its leaves is refused",
			cert: certsPEM(noCRLSign, ca.root), key: pkcs8PEM(t, leafKey), atFault: certAtFault, wantErr: "cRLSign"},
		{name: "fail/a CA without a subject key identifier for its leaves' authority key identifier is refused",
			cert: certsPEM(noSKI, ca.root), key: pkcs8PEM(t, leafKey), atFault: certAtFault, wantErr: "subject key identifier"},
		{name: "fail/a key file without PEM is named",
			cert: certsPEM(ca.inter), key: []byte("this is not PEM\n"), atFault: keyAtFault},
		{name: "fail/a key file with a corrupt key is named",
			cert: certsPEM(ca.inter), key: pemBlock("PRIVATE KEY", []byte("garbage")), atFault: keyAtFault},
		{name: "fail/an encrypted key is refused",
			cert: certsPEM(ca.inter), key: pemBlock("ENCRYPTED PRIVATE KEY", []byte("garbage")), atFault: keyAtFault},
		{name: "fail/a key that does not match the certificate is named",
			cert: certsPEM(ca.inter), key: pkcs8PEM(t, ca.rootKey), atFault: keyAtFault},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
			for name, data := range map[string][]byte{certFile: tc.cert, keyFile: tc.key} {
				if data != nil {
					if err := os.WriteFile(name, data, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			src, err := FromPEMFiles(certFile, keyFile)
			if tc.atFault != "" {
				if err == nil {
					t.Fatal("FromPEMFiles succeeded")
				}
				want := map[string]string{certAtFault: certFile, keyAtFault: keyFile}[tc.atFault]
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %q does not mention %q", err, tc.wantErr)
				}
				for line := range strings.Lines(string(tc.key)) {
					if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(err.Error(), strings.TrimSpace(line)) {
						t.Errorf("error %q quotes the key file", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("FromPEMFiles: %v", err)
			}
			iss, err := src(t.Context())
			if err != nil {
				t.Fatalf("source: %v", err)
			}
			if len(iss.Chain) != tc.wantLen {
				t.Errorf("chain has %d certificates, want %d", len(iss.Chain), tc.wantLen)
			}
			s := newSigner(t, src, Options{})
			leaf := issue(t, s, issueRequest(t, newKey(t, "p256"), dns("www.example.com")))[0]
			if err := leaf.CheckSignatureFrom(iss.Chain[0]); err != nil {
				t.Errorf("leaf is not signed by the file's CA: %v", err)
			}
			// Every CA that loads signs the CRL of its leaves, which name it
			// by its key identifier.
			if !bytes.Equal(leaf.AuthorityKeyId, iss.Chain[0].SubjectKeyId) {
				t.Errorf("leaf's authority key id = %x, want the CA's subject key id %x", leaf.AuthorityKeyId, iss.Chain[0].SubjectKeyId)
			}
			if _, err := s.SignCRL(t.Context(), signer.LeafIssuerKeyID(leaf), &x509.RevocationList{
				Number: big.NewInt(1), ThisUpdate: testNow, NextUpdate: testNow.Add(24 * time.Hour),
			}); err != nil {
				t.Errorf("the CA cannot sign the CRL of its leaf: %v", err)
			}
		})
	}
}
