package validate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// acmeExtension is the acmeIdentifier extension for keyAuth.
func acmeExtension(t *testing.T, keyAuth string, critical bool) pkix.Extension {
	t.Helper()
	sum := sha256.Sum256([]byte(keyAuth))
	der, err := asn1.Marshal(sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidACMEIdentifier, Critical: critical, Value: der}
}

// acmeCert builds a self-signed certificate as a tls-alpn-01 client would.
func acmeCert(t *testing.T, dnsNames []string, ips []net.IP, emails []string, exts ...pkix.Extension) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:    big.NewInt(1),
		Subject:         pkix.Name{CommonName: "acme-tls/1 test"},
		NotBefore:       time.Now().Add(-time.Hour),
		NotAfter:        time.Now().Add(time.Hour),
		DNSNames:        dnsNames,
		IPAddresses:     ips,
		EmailAddresses:  emails,
		ExtraExtensions: exts,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// alpnServer serves cert on loopback to a client whose SNI is wantSNI,
// and fails the handshake for any other. It returns the port.
func alpnServer(t *testing.T, wantSNI string, cert tls.Certificate, configure func(*tls.Config)) int {
	t.Helper()
	cfg := &tls.Config{
		NextProtos: []string{acmeTLS1},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != wantSNI {
				return nil, errors.New("unexpected SNI " + hello.ServerName)
			}
			return &cert, nil
		},
	}
	if configure != nil {
		configure(cfg)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { ln.Close() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.(*tls.Conn).Handshake()
				c.Read(make([]byte, 1)) // until the validator hangs up
			})
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// mutePort accepts connections and never speaks.
func mutePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { ln.Close() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.Copy(io.Discard, c) // until the validator hangs up
			})
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

func TestTLSALPN01ChecksTheACMECertificate(t *testing.T) {
	const name = "example.test"
	const arpa = "1.0.0.127.in-addr.arpa"
	loopback := net.ParseIP("127.0.0.1")
	good := func(t *testing.T) pkix.Extension { return acmeExtension(t, testKeyAuth, true) }
	tests := []struct {
		name      string
		identType string
		ident     string
		sni       string
		cert      func(t *testing.T) tls.Certificate
		server    func(*tls.Config)
		port      func(t *testing.T) int // instead of a TLS server
		timeout   time.Duration
		want      acme.ProblemType
	}{
		{
			name: "ok/dns name", identType: acme.IdentifierDNS, ident: name, sni: name,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, []string{name}, nil, nil, good(t)) },
		},
		{
			name: "ok/ip address with the reverse name as SNI", identType: acme.IdentifierIP, ident: "127.0.0.1", sni: arpa,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, nil, []net.IP{loopback}, nil, good(t)) },
		},
		{
			name: "ok/ip address written as a 16-byte SAN", identType: acme.IdentifierIP, ident: "127.0.0.1", sni: arpa,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, nil, []net.IP{loopback.To16()}, nil, good(t)) },
		},
		{
			name: "fail/no ALPN negotiated", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorTLS,
			cert:   func(t *testing.T) tls.Certificate { return acmeCert(t, []string{name}, nil, nil, good(t)) },
			server: func(c *tls.Config) { c.NextProtos = nil },
		},
		{
			name: "fail/server refuses acme-tls/1", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorTLS,
			cert:   func(t *testing.T) tls.Certificate { return acmeCert(t, []string{name}, nil, nil, good(t)) },
			server: func(c *tls.Config) { c.NextProtos = []string{"h2"} },
		},
		{
			name: "fail/TLS below 1.2", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorTLS,
			cert:   func(t *testing.T) tls.Certificate { return acmeCert(t, []string{name}, nil, nil, good(t)) },
			server: func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 },
		},
		{
			name: "fail/two SANs", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				return acmeCert(t, []string{name, "other.example.test"}, nil, nil, good(t))
			},
		},
		{
			name: "fail/a SAN of a kind crypto/x509 keeps apart", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				return acmeCert(t, []string{name}, nil, []string{"hostmaster@example.test"}, good(t))
			},
		},
		{
			name: "fail/a constructed [2] holding the name is not a dNSName", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				san := []byte{0x30, 2 + byte(len(name)), 0xa2, byte(len(name))}
				return acmeCert(t, nil, nil, nil, pkix.Extension{Id: oidSubjectAltName, Value: append(san, name...)}, good(t))
			},
		},
		{
			name: "fail/SAN of another name", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, []string{"other.test"}, nil, nil, good(t)) },
		},
		{
			name: "fail/SAN of another address", identType: acme.IdentifierIP, ident: "127.0.0.1", sni: arpa, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				return acmeCert(t, nil, []net.IP{net.ParseIP("127.0.0.2")}, nil, good(t))
			},
		},
		{
			name: "fail/ip identifier with a dNSName SAN", identType: acme.IdentifierIP, ident: "127.0.0.1", sni: arpa, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, []string{"127.0.0.1.test"}, nil, nil, good(t)) },
		},
		{
			name: "fail/no SAN", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, nil, nil, nil, good(t)) },
		},
		{
			name: "fail/missing extension", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate { return acmeCert(t, []string{name}, nil, nil) },
		},
		{
			name: "fail/non-critical extension", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				return acmeCert(t, []string{name}, nil, nil, acmeExtension(t, testKeyAuth, false))
			},
		},
		{
			name: "fail/wrong digest", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				return acmeCert(t, []string{name}, nil, nil, acmeExtension(t, "other.keyauth", true))
			},
		},
		{
			name: "fail/digest not wrapped in an OCTET STRING", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				sum := sha256.Sum256([]byte(testKeyAuth))
				return acmeCert(t, []string{name}, nil, nil, pkix.Extension{Id: oidACMEIdentifier, Critical: true, Value: sum[:]})
			},
		},
		{
			name: "fail/digest of the wrong length", identType: acme.IdentifierDNS, ident: name, sni: name, want: acme.ErrorIncorrectResponse,
			cert: func(t *testing.T) tls.Certificate {
				der, _ := asn1.Marshal([]byte("short"))
				return acmeCert(t, []string{name}, nil, nil, pkix.Extension{Id: oidACMEIdentifier, Critical: true, Value: der})
			},
		},
		{
			name: "fail/connection refused", identType: acme.IdentifierDNS, ident: name, want: acme.ErrorConnection,
			port: freePort,
		},
		{
			name: "fail/timeout", identType: acme.IdentifierDNS, ident: name, want: acme.ErrorConnection,
			port: mutePort, timeout: 200 * time.Millisecond,
		},
		{
			name: "fail/unknown name", identType: acme.IdentifierDNS, ident: "unknown.test", want: acme.ErrorDNS,
			port: freePort,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var port int
			if tt.port != nil {
				port = tt.port(t)
			} else {
				port = alpnServer(t, tt.sni, tt.cert(t), tt.server)
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			v := newValidator(t, Config{TLSPort: port, Timeout: timeout, Dial: loopbackDial("127.0.0.1", name)})
			wantOutcome(t, v.TLSALPN01(context.Background(), tt.identType, tt.ident, testKeyAuth), tt.want)
		})
	}
}

func TestTLSALPN01WithACancelledCallerIsAFaultNotAProblem(t *testing.T) {
	v := newValidator(t, Config{TLSPort: mutePort(t)})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	wantFault(t, v.TLSALPN01(ctx, acme.IdentifierIP, "127.0.0.1", testKeyAuth))
}
