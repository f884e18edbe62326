package validate

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// acmeTLS1 is the ALPN protocol of tls-alpn-01 (RFC 8737 §6.2).
const acmeTLS1 = "acme-tls/1"

// oidACMEIdentifier is the id-pe-acmeIdentifier certificate extension
// (RFC 8737 §6.1).
var oidACMEIdentifier = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 31}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// GeneralName tags (RFC 5280 §4.2.1.6).
const (
	tagDNSName   = 2
	tagIPAddress = 7
)

// TLSALPN01 validates a tls-alpn-01 challenge (RFC 8737 §3; RFC 8738 §6
// for IP identifiers). It connects to <identifier>:<TLSPort>, offers only
// "acme-tls/1" with SNI set to the name (for an IP address, its
// reverse-mapping name), and checks the certificate by hand: exactly one
// subjectAltName, the identifier, and a critical acmeIdentifier extension
// holding SHA-256(keyAuth).
func (v *Validator) TLSALPN01(ctx context.Context, identType, identValue, keyAuth string) error {
	host, ip, err := hostOf(identType, identValue)
	if err != nil {
		return err
	}
	sni := host
	if identType == acme.IdentifierIP {
		arpa, err := dns.ReverseAddr(host)
		if err != nil {
			return fmt.Errorf("validate: reverse name of %s: %w", host, err)
		}
		sni = strings.TrimSuffix(arpa, ".")
	}
	addr := net.JoinHostPort(host, strconv.Itoa(v.tlsPort))
	what := "connecting to " + addr

	tctx, cancel := v.withTimeout(ctx)
	defer cancel()
	conn, err := v.dial(withIdentHost(tctx, host), "tcp", addr)
	if err != nil {
		return v.failed(ctx, what, err)
	}
	defer conn.Close()
	tc := tls.Client(conn, &tls.Config{
		ServerName: sni,
		NextProtos: []string{acmeTLS1},
		// The certificate is self-signed by design; checkCertificate
		// checks what RFC 8737 asks of it.
		InsecureSkipVerify: true, //nolint:gosec // see above
		MinVersion:         tls.VersionTLS12,
	})
	if err := tc.HandshakeContext(tctx); err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) || isDropped(err) {
			return v.failed(ctx, "TLS handshake with "+addr, err)
		}
		return problem.TLSF("TLS handshake with %s (SNI %q, ALPN %q) failed: %s", addr, sni, acmeTLS1, netCause(err))
	}
	cs := tc.ConnectionState()
	if cs.NegotiatedProtocol != acmeTLS1 {
		return problem.TLSF("%s did not negotiate the ALPN protocol %q", addr, acmeTLS1)
	}
	if len(cs.PeerCertificates) == 0 {
		return problem.TLSF("%s sent no certificate", addr)
	}
	return checkCertificate(cs.PeerCertificates[0], identType, host, ip, keyAuth, addr)
}

// isDropped reports whether err is the connection failing under TLS
// rather than TLS failing.
func isDropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// checkCertificate checks an acme-tls/1 certificate (RFC 8737 §3).
func checkCertificate(cert *x509.Certificate, identType, host string, ip netip.Addr, keyAuth, addr string) error {
	names, err := subjectAltNames(cert)
	if err != nil {
		return problem.IncorrectResponseF("the certificate from %s: %s", addr, err)
	}
	if len(names) != 1 {
		return problem.IncorrectResponseF("the certificate from %s does not have exactly one subjectAltName entry; it must have one, %s", addr, host)
	}
	// A GeneralName of these kinds is primitive: a constructed [2] or [7]
	// is neither a dNSName nor an iPAddress (crypto/x509 skips it as an
	// unknown kind), whatever it holds.
	n := names[0]
	switch identType {
	case acme.IdentifierDNS:
		if n.Class != asn1.ClassContextSpecific || n.Tag != tagDNSName || n.IsCompound || !strings.EqualFold(string(n.Bytes), host) {
			return problem.IncorrectResponseF("the subjectAltName of the certificate from %s is not the dNSName %s", addr, host)
		}
	case acme.IdentifierIP:
		got, ok := netip.AddrFromSlice(n.Bytes)
		if n.Class != asn1.ClassContextSpecific || n.Tag != tagIPAddress || n.IsCompound || !ok || got.Unmap() != ip {
			return problem.IncorrectResponseF("the subjectAltName of the certificate from %s is not the iPAddress %s", addr, host)
		}
	}

	var ext *pkix.Extension
	for i, e := range cert.Extensions {
		if e.Id.Equal(oidACMEIdentifier) {
			ext = &cert.Extensions[i]
		}
	}
	if ext == nil {
		return problem.IncorrectResponseF("the certificate from %s has no acmeIdentifier extension (%s)", addr, oidACMEIdentifier)
	}
	if !ext.Critical {
		return problem.IncorrectResponseF("the acmeIdentifier extension of the certificate from %s is not critical", addr)
	}
	var digest []byte
	if rest, err := asn1.Unmarshal(ext.Value, &digest); err != nil || len(rest) != 0 {
		return problem.IncorrectResponseF("the acmeIdentifier extension of the certificate from %s is not a DER OCTET STRING", addr)
	}
	want := sha256.Sum256([]byte(keyAuth))
	if len(digest) != len(want) {
		return problem.IncorrectResponseF("the acmeIdentifier extension of the certificate from %s does not hold a SHA-256 digest (%d bytes)", addr, len(want))
	}
	if subtle.ConstantTimeCompare(digest, want[:]) != 1 {
		return problem.IncorrectResponseF("the acmeIdentifier extension of the certificate from %s is not the SHA-256 digest of the expected key authorization", addr)
	}
	return nil
}

// subjectAltNames returns every GeneralName of the certificate's
// subjectAltName extension, of whatever kind: crypto/x509 drops the kinds
// it does not know, and RFC 8737 §3 allows no other entry at all.
func subjectAltNames(cert *x509.Certificate) ([]asn1.RawValue, error) {
	for _, e := range cert.Extensions {
		if !e.Id.Equal(oidSubjectAltName) {
			continue
		}
		var names []asn1.RawValue
		rest, err := asn1.Unmarshal(e.Value, &names)
		if err != nil || len(rest) != 0 {
			return nil, errors.New("its subjectAltName extension is malformed")
		}
		return names, nil
	}
	return nil, errors.New("it has no subjectAltName extension")
}
