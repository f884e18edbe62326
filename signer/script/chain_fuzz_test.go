package script

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// FuzzParseChain feeds parseChain arbitrary program output. Whatever it
// accepts is a chain of parsable certificates whose leaf, not a CA,
// certifies the CSR's key for exactly the order's name (in its SANs and
// its common name alike), each signed by the next.
func FuzzParseChain(f *testing.F) {
	ca := newTestCA(f)
	// A fixed key, so that seeds stay meaningful across runs: the fuzz
	// engine keeps the output bytes, not the key.
	key := &ecdsa.PrivateKey{D: big.NewInt(42)}
	key.PublicKey.Curve = elliptic.P256()
	key.PublicKey.X, key.PublicKey.Y = elliptic.P256().ScalarBaseMult(key.D.Bytes())
	good := ca.leaf(f, &key.PublicKey, []string{"a.example.com"})
	f.Add(pemOf(good, ca.inter, ca.root))
	// The order's name in the SAN, another in the common name.
	f.Add(pemOf(sign(f, &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "b.example.com"},
		NotBefore: good.NotBefore, NotAfter: good.NotAfter, DNSNames: []string{"a.example.com"}}, ca.inter, &key.PublicKey, ca.interKey)))
	f.Add(pemOf(good))
	f.Add(pemOf(ca.inter, good))
	f.Add(append(pemOf(good), "trailing"...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	idents := []acme.Identifier{{Type: "dns", Value: "a.example.com"}}
	f.Fuzz(func(t *testing.T, out []byte) {
		chain, err := parseChain(out, &key.PublicKey, idents)
		if err != nil {
			if chain != nil {
				t.Fatal("an error with a chain")
			}
			return
		}
		if len(chain) == 0 {
			t.Fatal("accepted an empty chain")
		}
		certs := make([]*x509.Certificate, len(chain))
		for i, der := range chain {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatalf("accepted certificate %d does not parse: %v", i+1, err)
			}
			certs[i] = c
		}
		if !key.PublicKey.Equal(certs[0].PublicKey) {
			t.Fatal("accepted a leaf for another key")
		}
		leaf := certs[0]
		if leaf.IsCA {
			t.Fatal("accepted a CA certificate as the leaf")
		}
		// Every name the leaf holds, the common name too (a client
		// that reads it would take it for one the leaf certifies), is
		// the order's one name.
		names := map[string]bool{}
		for _, n := range leaf.DNSNames {
			names[strings.ToLower(n)] = true
		}
		if cn := leaf.Subject.CommonName; cn != "" {
			names[strings.ToLower(cn)] = true
		}
		if len(names) != 1 || !names["a.example.com"] || len(leaf.IPAddresses)+len(leaf.EmailAddresses)+len(leaf.URIs) != 0 {
			t.Fatalf("accepted a leaf naming %v %v %v %v (common name %q) for an order of a.example.com",
				leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, leaf.URIs, leaf.Subject.CommonName)
		}
		for i := 0; i+1 < len(certs); i++ {
			if err := certs[i].CheckSignatureFrom(certs[i+1]); err != nil {
				t.Fatalf("accepted certificate %d not signed by the next: %v", i+1, err)
			}
		}
	})
}
