package relay

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// testCA is a CA of the test's: its certificate (DER, self-signed) and
// its key.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: mustParse(t, der), key: key}
}

func pemOf(der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}) }

// reissued is a rewrite of the upstream's certificate download: its leaf
// issued again, by a CA of the test's, as change makes it (the key it
// certifies is change's to choose too), followed by that CA's
// certificate.
func reissued(change func(leaf *x509.Certificate) crypto.PublicKey) func(*testing.T, []byte) []byte {
	return func(t *testing.T, chain []byte) []byte {
		block, _ := pem.Decode(chain)
		if block == nil {
			t.Fatalf("the upstream's download holds no PEM block: %q", chain)
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		ca := newTestCA(t, "test CA")
		pub := change(leaf)
		der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, pub, ca.key)
		if err != nil {
			t.Fatal(err)
		}
		return append(pemOf(der), pemOf(ca.cert.Raw)...)
	}
}

func TestALeafTheUpstreamIssuedThatIsNotTheOrdersNeverReachesTheClient(t *testing.T) {
	tests := []struct {
		name   string
		change func(leaf *x509.Certificate) crypto.PublicKey
		why    string // what the failure says
	}{
		{"another name beside the order's", func(leaf *x509.Certificate) crypto.PublicKey {
			leaf.DNSNames = append(leaf.DNSNames, "other.example.net")
			return leaf.PublicKey
		}, "the leaf names dns:leaf.example.com, dns:other.example.net; the order is for dns:leaf.example.com"},
		{"another name instead of the order's", func(leaf *x509.Certificate) crypto.PublicKey {
			leaf.DNSNames, leaf.Subject.CommonName, leaf.RawSubject = []string{"other.example.net"}, "", nil
			return leaf.PublicKey
		}, "the leaf names dns:other.example.net; the order is for dns:leaf.example.com"},
		{"a common name outside the order", func(leaf *x509.Certificate) crypto.PublicKey {
			leaf.Subject.CommonName, leaf.RawSubject = "other.example.net", nil
			return leaf.PublicKey
		}, "the leaf names dns:leaf.example.com, dns:other.example.net"},
		{"another key than the CSR's", func(*x509.Certificate) crypto.PublicKey {
			k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				panic(err)
			}
			return k.Public()
		}, "another key than the CSR's"},
		{"a CA certificate", func(leaf *x509.Certificate) crypto.PublicKey {
			leaf.IsCA, leaf.BasicConstraintsValid = true, true
			return leaf.PublicKey
		}, "the leaf is a CA certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			b, up := pebbleBench(t)
			up.certs = reissued(tt.change)
			req := b.finalized(t, "leaf.example.com")
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			out := b.s.RunJob(ctx, b.job(t, req.OrderID))
			if out.Kind() != "failed" || !strings.Contains(out.String(), tt.why) {
				t.Fatalf("the attempt: %s; want failed (not retried: the upstream issued already), saying %q", out, tt.why)
			}
			b.settler.mu.Lock()
			defer b.settler.mu.Unlock()
			if chain, ok := b.settler.issued[req.OrderID]; ok {
				t.Errorf("the order was issued a chain of %d certificates; want none", len(chain))
			}
		})
	}
}

// The upstream's own leaf, as Pebble issues it, passes the check: the
// rewrite above changes nothing else that matters.
func TestALeafTheUpstreamIssuedForTheOrderReachesTheClientThroughTheRewrite(t *testing.T) {
	b, up := pebbleBench(t)
	up.certs = reissued(func(leaf *x509.Certificate) crypto.PublicKey { return leaf.PublicKey })
	b.relayThrough(t, "leaf.example.com")
}
