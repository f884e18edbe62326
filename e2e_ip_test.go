package caddyacmeproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/challenge/tlsalpn01"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/freeport"
)

// RFC 8738 end to end, over IPv4 and IPv6 loopback: lego proves an IP
// address by http-01 (§4: the validator connects to the address itself,
// an IPv6 one bracketed, with Host the address; lego's own server answers
// only to that Host) and by tls-alpn-01 (§6: the SNI is the address's
// reverse name in in-addr.arpa or ip6.arpa, which the server here
// requires), and the leaf names the address as an iPAddress SAN of its
// length, never as a dNSName.
func TestLegoObtainsACertificateForAnIPAddressOverHTTP01AndTLSALPN01(t *testing.T) {
	needIPv6Loopback(t)
	env := newE2EEnv(t)
	httpPort, tlsPort := freeDualStackPort(t), freeDualStackPort(t)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: tlsPort})

	tests := []struct {
		name    string
		ip      string
		sni     string // tls-alpn-01 only
		byteLen int
	}{
		{name: "http-01 for 127.0.0.1", ip: "127.0.0.1", byteLen: net.IPv4len},
		{name: "http-01 for ::1", ip: "::1", byteLen: net.IPv6len},
		{name: "tls-alpn-01 for 127.0.0.1", ip: "127.0.0.1", sni: "1.0.0.127.in-addr.arpa", byteLen: net.IPv4len},
		{name: "tls-alpn-01 for ::1", ip: "::1",
			sni:     "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa",
			byteLen: net.IPv6len},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newE2ELego(t, env)
			var err error
			if tt.sni == "" {
				err = client.Challenge.SetHTTP01Provider(http01.NewProviderServer(tt.ip, strconv.Itoa(httpPort)))
			} else {
				err = client.Challenge.SetTLSALPN01Provider(&sniCheckingALPN01{t: t, addr: net.JoinHostPort(tt.ip, strconv.Itoa(tlsPort)), sni: tt.sni})
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
			defer cancel()
			res, err := client.Certificate.Obtain(ctx, certificate.ObtainRequest{
				Domains: []string{tt.ip}, Bundle: true, KeyType: certcrypto.EC256,
			})
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			leaf := env.checkIssued(t, e2ePEMChain(t, res.Certificate), tt.ip)
			if len(leaf.DNSNames) != 0 {
				t.Errorf("the leaf names %q as dNSNames", leaf.DNSNames)
			}
			for _, n := range leafSANs(t, leaf) {
				if n.Class != asn1.ClassContextSpecific || n.Tag != 7 || len(n.Bytes) != tt.byteLen {
					t.Errorf("the leaf's SAN holds [%d] of %d bytes, want an iPAddress [7] of %d", n.Tag, len(n.Bytes), tt.byteLen)
				}
			}
		})
	}
}

// freeDualStackPort is a TCP port free on both 127.0.0.1 and ::1, for a
// validation port both address families are validated on.
func freeDualStackPort(t *testing.T) int {
	t.Helper()
	port, err := freeport.TCP("127.0.0.1", "::1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// leafSANs returns the GeneralNames of the leaf's subjectAltName, of every
// kind.
func leafSANs(t *testing.T, leaf *x509.Certificate) []asn1.RawValue {
	t.Helper()
	for _, e := range leaf.Extensions {
		if e.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 17}) {
			var names []asn1.RawValue
			if rest, err := asn1.Unmarshal(e.Value, &names); err != nil || len(rest) != 0 {
				t.Fatalf("the leaf's subjectAltName is malformed: %v", err)
			}
			return names
		}
	}
	t.Fatal("the leaf has no subjectAltName")
	return nil
}

// sniCheckingALPN01 is a lego tls-alpn-01 provider that serves lego's
// challenge certificate on addr only to a ClientHello whose SNI is sni.
type sniCheckingALPN01 struct {
	t    *testing.T
	addr string
	sni  string

	ln net.Listener
	wg sync.WaitGroup
}

func (p *sniCheckingALPN01) Present(_ context.Context, domain, _, keyAuth string) error {
	cert, err := tlsalpn01.ChallengeCert(domain, keyAuth)
	if err != nil {
		return err
	}
	cfg := &tls.Config{
		NextProtos: []string{tlsalpn01.ACMETLS1Protocol},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != p.sni {
				p.t.Errorf("tls-alpn-01 validation sent SNI %q, want %q", hello.ServerName, p.sni)
				return nil, errors.New("unexpected SNI")
			}
			return cert, nil
		},
	}
	if p.ln, err = tls.Listen("tcp", p.addr, cfg); err != nil {
		return err
	}
	p.wg.Go(func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(e2eWait))
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Read(make([]byte, 1)) // until the validator hangs up
			})
		}
	})
	return nil
}

func (p *sniCheckingALPN01) CleanUp(context.Context, string, string, string) error {
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// RFC 8738 §3 asks clients for an IPv6 address in RFC 5952 form; this
// server takes another spelling and writes the address in that form
// (README, "IP addresses (RFC 8738)"), so the order and its authorization
// show ::1, validation reaches [::1], a CSR that names the address as a
// dNSName is refused with badCSR and leaves the order ready, and a CSR
// with the iPAddress is issued for.
func TestXCryptoACMEOrdersAnIPv6AddressSpeltLongAndGetsItInRFC5952Form(t *testing.T) {
	needIPv6Loopback(t)
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := serveE2EHTTP01(t, ln)
	env := newE2EEnv(t)
	env.load(t, e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t)})

	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, env)
	order, err := c.AuthorizeOrder(ctx, xacme.IPIDs("0:0:0:0:0:0:0:1"))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	if want := xacme.IPIDs("::1"); !slices.Equal(order.Identifiers, want) {
		t.Errorf("the order's identifiers are %+v, want %+v", order.Identifiers, want)
	}
	if len(order.AuthzURLs) != 1 {
		t.Fatalf("%d authorizations for one identifier", len(order.AuthzURLs))
	}
	z, err := c.GetAuthorization(ctx, order.AuthzURLs[0])
	if err != nil {
		t.Fatalf("GetAuthorization: %v", err)
	}
	if z.Identifier != (xacme.AuthzID{Type: "ip", Value: "::1"}) || z.Wildcard {
		t.Errorf("the authorization is for %+v (wildcard %v), want ip ::1, no wildcard", z.Identifier, z.Wildcard)
	}
	e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, order.AuthzURLs[0]))
	if _, err := c.WaitAuthorization(ctx, order.AuthzURLs[0]); err != nil {
		t.Fatalf("WaitAuthorization: %v", err)
	}
	if order, err = c.WaitOrder(ctx, order.URI); err != nil || order.Status != xacme.StatusReady {
		t.Fatalf("WaitOrder: %+v, %v; want ready", order, err)
	}

	finalize := func(tmpl *x509.CertificateRequest) ([][]byte, error) {
		csr, err := x509.CreateCertificateRequest(rand.Reader, tmpl, e2eP256Key(t))
		if err != nil {
			t.Fatal(err)
		}
		chain, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csr, true)
		return chain, err
	}
	for _, bad := range []struct {
		name string
		tmpl *x509.CertificateRequest
	}{
		{"the address as a dNSName", &x509.CertificateRequest{DNSNames: []string{"::1"}}},
		{"the address as a dNSName beside its iPAddress", &x509.CertificateRequest{DNSNames: []string{"::1"}, IPAddresses: []net.IP{net.IPv6loopback}}},
	} {
		_, err := finalize(bad.tmpl)
		if ae, ok := errors.AsType[*xacme.Error](err); !ok || ae.ProblemType != "urn:ietf:params:acme:error:badCSR" {
			t.Errorf("finalize with %s: %v; want a badCSR problem", bad.name, err)
		}
	}
	chain, err := finalize(&x509.CertificateRequest{IPAddresses: []net.IP{net.ParseIP("0:0::1")}})
	if err != nil {
		t.Fatalf("finalize with the iPAddress ::1: %v", err)
	}
	leaf := env.checkIssued(t, chain, "::1")
	if len(leaf.DNSNames) != 0 {
		t.Errorf("the leaf names %q as dNSNames", leaf.DNSNames)
	}
}

// needIPv6Loopback skips the test when ::1 cannot be listened on, or
// fails it under ACMEPROXY_E2E=1, where CI's machine has it: an IPv6
// path that silently stopped running would prove nothing.
func needIPv6Loopback(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err == nil {
		ln.Close()
		return
	}
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatalf("IPv6 loopback is not available here (%v); ACMEPROXY_E2E=1 requires it", err)
	}
	t.Skipf("skipping: IPv6 loopback is not available here (%v); with ACMEPROXY_E2E=1 this fails instead", err)
}
