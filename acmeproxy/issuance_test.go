package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net"
	"sort"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
)

func TestXCryptoACMEClientObtainsACertificateForNamesAndAnIP(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e := newTestEnv(t, nil)
		c := e.client(ctx)

		ids := []acme.AuthzID{{Type: "dns", Value: "a.example.com"}, {Type: "dns", Value: "b.example.com"}, {Type: "ip", Value: "127.0.0.1"}}
		o, err := c.AuthorizeOrder(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		o = e.authorize(ctx, c, o)
		if o.Status != acme.StatusReady {
			t.Fatalf("order is %s, want ready", o.Status)
		}
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		csr := newCSR(t, key, "a.example.com", []string{"a.example.com", "b.example.com"}, []net.IP{net.ParseIP("127.0.0.1")})
		ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
		if err != nil {
			t.Fatalf("finalize: %v", err)
		}
		leaf, err := x509.ParseCertificate(ders[0])
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(e.root)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "b.example.com"}); err != nil {
			t.Errorf("leaf does not chain to the CA: %v", err)
		}
		names := append([]string(nil), leaf.DNSNames...)
		sort.Strings(names)
		if len(names) != 2 || names[0] != "a.example.com" || names[1] != "b.example.com" ||
			len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
			t.Errorf("leaf names %v %v, want exactly the order's", leaf.DNSNames, leaf.IPAddresses)
		}
		lintcheck.PrivateLeaf(t, ders[0])
	})
}
