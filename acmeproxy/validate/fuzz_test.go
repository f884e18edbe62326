package validate

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// derTLV is one DER element: identifier octet tag, a minimal length,
// then content. Written by hand so that the fuzz checks do not lean on
// encoding/asn1, which the code under test uses.
func derTLV(tag byte, content []byte) []byte {
	n := len(content)
	out := []byte{tag}
	switch {
	case n < 0x80:
		out = append(out, byte(n))
	case n < 0x100:
		out = append(out, 0x81, byte(n))
	default:
		out = append(out, 0x82, byte(n>>8), byte(n))
	}
	return append(out, content...)
}

// sanValue is a subjectAltName extension value: a SEQUENCE of the given
// GeneralNames, each already encoded.
func sanValue(names ...[]byte) []byte { return derTLV(0x30, bytes.Join(names, nil)) }

// acmeValue is the acmeIdentifier extension value for keyAuth: an OCTET
// STRING of its SHA-256 digest (RFC 8737 §3).
func acmeValue(keyAuth string) []byte {
	sum := sha256.Sum256([]byte(keyAuth))
	return derTLV(0x04, sum[:])
}

var (
	fuzzCertKey = func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	}()
	emailSAN = []byte("hostmaster@example.test")
)

// presented is the certificate a client's server would present with
// these two extension values, as crypto/tls hands it over: created,
// then parsed by crypto/x509. ok is false when crypto/x509 refuses it,
// in which case the handshake fails before checkCertificate is reached.
func presented(san, acme []byte, critical bool) (*x509.Certificate, bool) {
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "acme-tls/1 fuzz"},
		NotBefore:    time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC),
		ExtraExtensions: []pkix.Extension{
			{Id: oidSubjectAltName, Value: san},
			{Id: oidACMEIdentifier, Critical: critical, Value: acme},
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, fuzzCertKey.Public(), fuzzCertKey)
	if err != nil {
		return nil, false
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, false
	}
	return cert, true
}

// FuzzCheckCertificate feeds the tls-alpn-01 certificate check a
// subjectAltName and an acmeIdentifier extension of any bytes. It must
// never panic, answer only nil or an incorrectResponse problem, and
// accept only a certificate whose acmeIdentifier is critical and exactly
// the DER OCTET STRING of SHA-256(keyAuth), and whose subjectAltName is
// exactly one GeneralName: the dNSName of the identifier (ASCII case
// aside) or its iPAddress.
func FuzzCheckCertificate(f *testing.F) {
	const name = "example.test"
	v4 := []byte{127, 0, 0, 1}
	v6 := netip.MustParseAddr("2001:db8::1").AsSlice()
	mapped := netip.AddrFrom16(netip.MustParseAddr("127.0.0.1").As16()).AsSlice()
	dnsSAN := func(s string) []byte { return derTLV(0x82, []byte(s)) }
	ipSAN := func(b []byte) []byte { return derTLV(0x87, b) }
	good := acmeValue(testKeyAuth)
	seeds := []struct {
		ip       bool
		host     string
		san      []byte
		acme     []byte
		critical bool
	}{
		{false, name, sanValue(dnsSAN(name)), good, true},                                  // valid
		{false, name, sanValue(dnsSAN("EXAMPLE.Test")), good, true},                        // valid, case aside
		{true, "127.0.0.1", sanValue(ipSAN(v4)), good, true},                               // valid
		{true, "127.0.0.1", sanValue(ipSAN(mapped)), good, true},                           // valid, 16-byte form
		{true, "2001:db8::1", sanValue(ipSAN(v6)), good, true},                             // valid
		{false, name, sanValue(dnsSAN(name)), good, false},                                 // not critical
		{false, name, sanValue(dnsSAN(name)), acmeValue("other"), true},                    // wrong digest
		{false, name, sanValue(dnsSAN(name)), good[2:], true},                              // no OCTET STRING
		{false, name, sanValue(dnsSAN(name)), append(good[:len(good):len(good)], 0), true}, // trailing byte
		{false, name, sanValue(dnsSAN(name)), derTLV(0x04, []byte("short")), true},         // short digest
		{false, name, sanValue(dnsSAN(name), dnsSAN("other.test")), good, true},            // two SANs
		{false, name, sanValue(dnsSAN(name), derTLV(0x81, emailSAN)), good, true},          // and an email
		{false, name, sanValue(), good, true},                                              // no SAN
		{false, name, sanValue(dnsSAN("other.test")), good, true},                          // another name
		{false, name, sanValue(dnsSAN(name + ".")), good, true},                            // trailing dot
		{false, name, sanValue(derTLV(0xa2, []byte(name))), good, true},                    // constructed [2]
		{false, name, sanValue(derTLV(0xa2, dnsSAN(name))), good, true},                    // constructed [2] around a dNSName
		{true, "127.0.0.1", sanValue(derTLV(0xa7, v4)), good, true},                        // constructed [7]
		{true, "127.0.0.1", sanValue(ipSAN([]byte{127, 0, 0, 2})), good, true},             // another address
		{true, "127.0.0.1", sanValue(dnsSAN("127.0.0.1")), good, true},                     // a dNSName for an address
		{false, "k.test", sanValue(dnsSAN("\u212a.test")), good, true},                     // Kelvin sign folds to k
		{false, name, sanValue(derTLV(0x81, []byte(name))), good, true},                    // the name as an rfc822Name
		{false, name, sanValue(derTLV(0x86, []byte(name))), good, true},                    // the name as a URI
		{true, "127.0.0.1", sanValue(dnsSAN(string(v4))), good, true},                      // the address's bytes as a dNSName
		{true, "127.0.0.1", sanValue(derTLV(0x88, v4)), good, true},                        // the address's bytes as a registeredID
	}
	for _, s := range seeds {
		f.Add(s.ip, s.host, testKeyAuth, s.san, s.acme, s.critical)
	}
	f.Fuzz(func(t *testing.T, ipIdent bool, ident, keyAuth string, san, acmeExt []byte, critical bool) {
		identType := acme.IdentifierDNS
		if ipIdent {
			identType = acme.IdentifierIP
		}
		host, ip, err := hostOf(identType, ident)
		if err != nil {
			return
		}
		const addr = "192.0.2.1:443"

		// The check itself, on the extensions as they are, even those
		// crypto/x509 would refuse: never a panic, never a fault.
		raw := &x509.Certificate{Extensions: []pkix.Extension{
			{Id: oidSubjectAltName, Value: san},
			{Id: oidACMEIdentifier, Critical: critical, Value: acmeExt},
		}}
		rawErr := checkCertificate(raw, identType, host, ip, keyAuth, addr)
		wantIncorrectResponse(t, rawErr)

		cert, ok := presented(san, acmeExt, critical)
		if !ok {
			return
		}
		err = checkCertificate(cert, identType, host, ip, keyAuth, addr)
		wantIncorrectResponse(t, err)
		if err != nil {
			return
		}
		if rawErr != nil {
			t.Errorf("accepted as parsed by crypto/x509 but refused as raw extensions: %v", rawErr)
		}
		if !critical {
			t.Errorf("accepted a non-critical acmeIdentifier extension")
		}
		if !bytes.Equal(acmeExt, acmeValue(keyAuth)) {
			t.Errorf("accepted acmeIdentifier %x; the only acceptable value is %x", acmeExt, acmeValue(keyAuth))
		}
		s := cryptobyte.String(san)
		var names cryptobyte.String
		if !s.ReadASN1(&names, cbasn1.SEQUENCE) || !s.Empty() {
			t.Fatalf("accepted a subjectAltName %x that is not one DER SEQUENCE", san)
		}
		var gn cryptobyte.String
		var tag cbasn1.Tag
		if !names.ReadAnyASN1(&gn, &tag) || !names.Empty() {
			t.Fatalf("accepted a subjectAltName %x that is not exactly one GeneralName", san)
		}
		switch identType {
		case acme.IdentifierDNS:
			if tag != cbasn1.Tag(tagDNSName).ContextSpecific() || !asciiEqualFold(string(gn), host) {
				t.Errorf("accepted GeneralName tag %#x %q for the dNSName %s", uint8(tag), gn, host)
			}
		case acme.IdentifierIP:
			got, ok := netip.AddrFromSlice(gn)
			if tag != cbasn1.Tag(tagIPAddress).ContextSpecific() || !ok || got.Unmap() != ip {
				t.Errorf("accepted GeneralName tag %#x %x for the iPAddress %s", uint8(tag), []byte(gn), ip)
			}
		}
	})
}

// asciiEqualFold compares as DNS does: ASCII letters without regard to
// case, every other byte exactly.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// wantIncorrectResponse checks that err is nil or an incorrectResponse
// problem with a detail: a certificate the client presents is the
// client's answer, never a fault of ours.
func wantIncorrectResponse(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	p, ok := problem.As(err)
	if !ok || p.Type != acme.ErrorIncorrectResponse || p.Detail == "" {
		t.Fatalf("got %v (%T); want nil or an incorrectResponse problem with a detail", err, err)
	}
}

// FuzzCheckRedirect feeds the http-01 redirect policy any Location, as
// net/http resolves it against the challenge URL, after any number of
// hops, on any pair of ports. It must never panic, answer only nil or a
// connection problem with a bounded detail that names neither the
// userinfo nor the query of the first URL, and accept only a redirect
// within the hop limit to a named host over http on the HTTP port or
// https on the TLS port, the port being the one net/http will dial.
func FuzzCheckRedirect(f *testing.F) {
	for _, s := range []struct {
		location          string
		hops              uint8
		httpPort, tlsPort uint16
	}{
		{"http://example.test/.well-known/acme-challenge/tok", 1, 80, 443},
		{"https://example.test/final", 1, 80, 443},
		{"/relative/path", 1, 80, 443},
		{"//other.test/path", 1, 80, 443},
		{"https://example.test:443/", 5, 80, 443},
		{"https://example.test:443/", 6, 80, 443},
		{"http://example.test:8080/", 1, 8080, 8443},
		{"http://example.test/", 1, 8080, 8443},
		{"http://example.test:0080/", 1, 80, 443},
		{"http://example.test:443/", 1, 80, 443},
		{"https://example.test:80/", 1, 80, 443},
		{"http://example.test:65616/", 1, 80, 443},
		{"http://[::1]:80/", 1, 80, 443},
		{"http://user:pw@example.test/?q=1#frag", 1, 80, 443},
		{"HTTPS://EXAMPLE.TEST/", 1, 80, 443},
		{"ftp://example.test/", 1, 80, 443},
		{"file:///etc/passwd", 1, 80, 443},
		{"javascript:alert(1)", 1, 80, 443},
		{"http:opaque", 1, 80, 443},
		{"http://:80/", 1, 80, 443},
		{"http:///path", 1, 80, 443},
		{"http://" + strings.Repeat("a", 2000) + ".test/", 1, 80, 443},
		{"http://" + strings.Repeat("a", 2000) + ".test:81/", 1, 80, 443},
		{strings.Repeat("x", 2000) + "://example.test/", 1, 80, 443},
	} {
		f.Add(s.location, s.hops, s.httpPort, s.tlsPort)
	}
	const (
		secretUser  = "FIRSTURLUSER"
		secretQuery = "FIRSTURLQUERY"
	)
	first, err := url.Parse("http://" + secretUser + ":pw@example.test/.well-known/acme-challenge/tok?" + secretQuery)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, location string, hops uint8, httpPort, tlsPort uint16) {
		v, err := New(Config{HTTPPort: int(httpPort), TLSPort: int(tlsPort), Resolvers: []string{"127.0.0.1:53"}})
		if err != nil {
			t.Fatalf("New with ports %d and %d: %v", httpPort, tlsPort, err)
		}
		// As net/http does: the Location resolved against the URL
		// that answered with it.
		u, err := first.Parse(location)
		if err != nil {
			return
		}
		via := make([]*http.Request, 1+int(hops)%8)
		for i := range via {
			via[i] = &http.Request{URL: first}
		}
		err = v.checkRedirect(&http.Request{URL: u}, via)
		if err != nil {
			p, ok := problem.As(err)
			if !ok || p.Type != acme.ErrorConnection || p.Detail == "" {
				t.Fatalf("got %v (%T); want nil or a connection problem with a detail", err, err)
			}
			if len(p.Detail) > 1024 {
				t.Errorf("a detail of %d bytes: the URL's parts are not clipped", len(p.Detail))
			}
			for _, secret := range []string{secretUser, secretQuery} {
				if strings.Contains(p.Detail, secret) && !strings.Contains(location, secret) {
					t.Errorf("the detail %q names the first URL's %s", p.Detail, secret)
				}
			}
			return
		}
		if len(via) > v.maxRedirects {
			t.Errorf("accepted redirect number %d; the limit is %d", len(via), v.maxRedirects)
		}
		if u.Hostname() == "" {
			t.Errorf("accepted %.200q, which names no host", u)
		}
		// The port net/http dials: the URL's, else the scheme's default.
		want, dialed := map[string]int{"http": v.httpPort, "https": v.tlsPort}[u.Scheme], u.Port()
		if dialed == "" {
			dialed = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		if want == 0 {
			t.Fatalf("accepted %.200q, whose scheme %.200q is neither http nor https", u, u.Scheme)
		}
		if n, err := strconv.ParseUint(dialed, 10, 16); err != nil || int(n) != want {
			t.Errorf("accepted %.200q: net/http dials port %q, but %s is allowed on port %d only", u, dialed, u.Scheme, want)
		}
	})
}
