package script

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

func TestOnlyAChainCertifyingTheCSRKeyForTheOrdersNamesIsACertificate(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	key := newKey(t)
	pub := key.Public()
	names := []string{"a.example.com", "b.example.com"}
	idents := []acme.Identifier{{Type: "dns", Value: "a.example.com"}, {Type: "dns", Value: "B.example.com"}, {Type: "ip", Value: "10.0.0.1"}}
	good := ca.leaf(t, pub, names, "10.0.0.1")

	caLeafTmpl := caTemplate("a.example.com")
	caLeafTmpl.DNSNames, caLeafTmpl.IPAddresses = names, good.IPAddresses
	caLeaf := sign(t, caLeafTmpl, ca.inter, pub, ca.interKey)

	withCN := func(cn string) *x509.Certificate {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(cn)) + 1000), Subject: pkix.Name{CommonName: cn},
			NotBefore: good.NotBefore, NotAfter: good.NotAfter, DNSNames: names, IPAddresses: good.IPAddresses}
		return sign(t, tmpl, ca.inter, pub, ca.interKey)
	}
	cnInOrder, cnAddress, cnOutside := withCN("B.EXAMPLE.COM"), withCN("10.0.0.1"), withCN("c.example.com")
	neverValid := sign(t, &x509.Certificate{SerialNumber: big.NewInt(2000), NotBefore: good.NotAfter, NotAfter: good.NotBefore,
		DNSNames: names, IPAddresses: good.IPAddresses}, ca.inter, pub, ca.interKey)

	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("not really")})
	tests := []struct {
		name    string
		out     []byte
		want    []*x509.Certificate // nil: refused
		wantErr string
	}{
		{name: "leaf, intermediate and root", out: pemOf(good, ca.inter, ca.root), want: []*x509.Certificate{good, ca.inter, ca.root}},
		{name: "leaf alone, with blank lines around", out: append(append([]byte("\n\n"), pemOf(good)...), "\n  \n"...), want: []*x509.Certificate{good}},
		{name: "a chain for another key", out: pemOf(ca.leaf(t, newKey(t).Public(), names, "10.0.0.1"), ca.inter), wantErr: "another key"},
		{name: "a name missing", out: pemOf(ca.leaf(t, pub, names[:1], "10.0.0.1"), ca.inter), wantErr: "the leaf names"},
		{name: "a name too many", out: pemOf(ca.leaf(t, pub, append(names, "c.example.com"), "10.0.0.1"), ca.inter), wantErr: "the leaf names"},
		{name: "a common name among the order's names", out: pemOf(cnInOrder, ca.inter), want: []*x509.Certificate{cnInOrder, ca.inter}},
		{name: "an address of the order as the common name", out: pemOf(cnAddress, ca.inter), want: []*x509.Certificate{cnAddress, ca.inter}},
		{name: "a common name outside the order", out: pemOf(cnOutside, ca.inter), wantErr: "the leaf names"},
		{name: "an address for a name", out: pemOf(ca.leaf(t, pub, names, "10.0.0.2"), ca.inter), wantErr: "the leaf names"},
		{name: "garbage", out: []byte("Signed OK, see /tmp/cert.pem\n"), wantErr: "other than PEM"},
		{name: "nothing", out: nil, wantErr: "no PEM certificate"},
		{name: "garbage after the chain", out: append(pemOf(good, ca.inter), "done\n"...), wantErr: "other than PEM"},
		{name: "garbage before the chain", out: append([]byte("Signature ok\n"), pemOf(good, ca.inter)...), wantErr: "other than PEM"},
		{name: "garbage between the certificates", out: append(append(pemOf(good), "INTERLEAVED\n"...), pemOf(ca.inter)...), wantErr: "other than PEM"},
		{name: "a private key in the output", out: append(pemOf(good), keyPEM...), wantErr: `"EC PRIVATE KEY"`},
		{name: "a CERTIFICATE block that does not parse", out: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), wantErr: "does not parse"},
		{name: "an intermediate that did not sign the leaf", out: pemOf(good, other.inter), wantErr: "certificate 1 of the output is not signed by certificate 2"},
		{name: "a root that did not sign the intermediate", out: pemOf(good, ca.inter, other.root), wantErr: "certificate 2 of the output is not signed by certificate 3"},
		{name: "a CA certificate as the leaf", out: pemOf(caLeaf, ca.inter), wantErr: "is a CA"},
		{name: "a leaf whose validity ends before it begins", out: pemOf(neverValid, ca.inter), wantErr: "ends before it begins"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chain, err := parseChain(tt.out, pub, idents)
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseChain: %d certificates, error %v; want an error with %q", len(chain), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseChain: %v", err)
			}
			if len(chain) != len(tt.want) {
				t.Fatalf("%d certificates; want %d", len(chain), len(tt.want))
			}
			for i, c := range tt.want {
				if !bytes.Equal(chain[i], c.Raw) {
					t.Errorf("certificate %d is not the one printed there", i+1)
				}
			}
		})
	}
}
