package caddyacmeproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/challenge/tlsalpn01"
)

// RFC 8738 end to end, over IPv4 and IPv6 loopback: lego proves an IP
// address by http-01 (§4: the validator connects to the address itself,
// an IPv6 one bracketed, with Host the address; lego's own server answers
// only to that Host) and by tls-alpn-01 (§6: the SNI is the address's
// reverse name in in-addr.arpa or ip6.arpa, which the server here
// requires), and the leaf names the address as an iPAddress SAN of its
// length, never as a dNSName.
func TestLegoObtainsACertificateForAnIPAddressOverHTTP01AndTLSALPN01(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("IPv6 loopback is not available here: %v", err)
	} else {
		ln.Close()
	}
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
	for range 20 {
		ln6, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln6.Addr().(*net.TCPAddr).Port
		ln4, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		ln6.Close()
		if err == nil {
			ln4.Close()
			return port
		}
	}
	t.Fatal("no port free on both 127.0.0.1 and ::1")
	return 0
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
