package localca

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

func newSigner(t testing.TB, src Source, opts Options) *Signer {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = clocktest.New(testNow)
	}
	s, err := New(src, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestIssuedLeafChainsToTheCAAndNamesExactlyTheOrder(t *testing.T) {
	ca := defaultCA(t)
	s := newSigner(t, ca.source(), Options{})
	tests := []struct {
		name    string
		key     string
		ids     []acme.Identifier
		wantKU  x509.KeyUsage
		wantCN  string
		wantIPs []string
	}{
		{"ok/ECDSA P-256 key, one DNS name", "p256", []acme.Identifier{dns("www.example.com")},
			x509.KeyUsageDigitalSignature, "www.example.com", nil},
		{"ok/ECDSA P-384 key, DNS and IP names", "p384", []acme.Identifier{dns("a.example.com"), ip("192.0.2.7"), dns("*.b.example.com"), ip("2001:db8::1")},
			x509.KeyUsageDigitalSignature, "a.example.com", []string{"192.0.2.7", "2001:db8::1"}},
		{"ok/RSA 2048 key also gets keyEncipherment", "rsa2048", []acme.Identifier{dns("rsa.example.com")},
			x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, "rsa.example.com", nil},
		{"ok/Ed25519 key", "ed25519", []acme.Identifier{dns("ed.example.com"), dns("ed2.example.com")},
			x509.KeyUsageDigitalSignature, "ed.example.com", nil},
		{"ok/IP address only, its CN is the address", "p256", []acme.Identifier{ip("198.51.100.1")},
			x509.KeyUsageDigitalSignature, "198.51.100.1", []string{"198.51.100.1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chain := issue(t, s, issueRequest(t, newKey(t, tc.key), tc.ids...))
			leaf := ca.verify(t, chain[0].Raw, testNow)

			var wantDNS []string
			for _, id := range tc.ids {
				if id.Type == "dns" {
					wantDNS = append(wantDNS, id.Value)
				}
			}
			if !slices.Equal(leaf.DNSNames, wantDNS) {
				t.Errorf("DNSNames = %q, want %q", leaf.DNSNames, wantDNS)
			}
			var gotIPs []string
			for _, a := range leaf.IPAddresses {
				gotIPs = append(gotIPs, a.String())
			}
			if !slices.Equal(gotIPs, tc.wantIPs) {
				t.Errorf("IPAddresses = %q, want %q", gotIPs, tc.wantIPs)
			}
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, tc.wantCN)
			}
			if leaf.KeyUsage != tc.wantKU {
				t.Errorf("KeyUsage = %b, want %b", leaf.KeyUsage, tc.wantKU)
			}
			if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(leaf.UnknownExtKeyUsage) > 0 {
				t.Errorf("ExtKeyUsage = %v %v, want serverAuth only", leaf.ExtKeyUsage, leaf.UnknownExtKeyUsage)
			}
			if !leaf.BasicConstraintsValid || leaf.IsCA {
				t.Errorf("basicConstraints valid=%v cA=%v, want present with cA false", leaf.BasicConstraintsValid, leaf.IsCA)
			}
			wantSKI, _ := subjectKeyID(leaf.PublicKey)
			if len(leaf.SubjectKeyId) == 0 || !bytes.Equal(leaf.SubjectKeyId, wantSKI) {
				t.Errorf("SubjectKeyId = %x, want %x", leaf.SubjectKeyId, wantSKI)
			}
			if !bytes.Equal(leaf.AuthorityKeyId, ca.inter.SubjectKeyId) {
				t.Errorf("AuthorityKeyId = %x, want the intermediate's %x", leaf.AuthorityKeyId, ca.inter.SubjectKeyId)
			}
			if len(chain) != 2 || !chain[1].Equal(ca.inter) {
				t.Errorf("chain has %d certificates, want the leaf and the intermediate", len(chain))
			}
		})
	}
}

func TestACertificateProfileSetsTheLeafsExtendedKeyUsagesAndCommonName(t *testing.T) {
	ca := defaultCA(t)
	s := newSigner(t, ca.source(), Options{})
	serverAuth, clientAuth := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	tests := []struct {
		name    string
		profile *signer.CertificateProfile
		wantEKU []x509.ExtKeyUsage
		wantCN  string
	}{
		{"ok/no certificate profile: serverAuth and a common name", nil, []x509.ExtKeyUsage{serverAuth}, "www.example.com"},
		{"ok/a profile without EKUs keeps serverAuth", &signer.CertificateProfile{Name: "plain"}, []x509.ExtKeyUsage{serverAuth}, "www.example.com"},
		{"ok/a client_auth profile gets clientAuth only", &signer.CertificateProfile{Name: "client", ExtKeyUsage: []x509.ExtKeyUsage{clientAuth}},
			[]x509.ExtKeyUsage{clientAuth}, "www.example.com"},
		{"ok/both EKUs in the profile's order", &signer.CertificateProfile{Name: "both", ExtKeyUsage: []x509.ExtKeyUsage{serverAuth, clientAuth}},
			[]x509.ExtKeyUsage{serverAuth, clientAuth}, "www.example.com"},
		{"ok/common name off leaves the subject empty", &signer.CertificateProfile{Name: "nocn", OmitCommonName: true},
			[]x509.ExtKeyUsage{serverAuth}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := issueRequest(t, newKey(t, "p256"), dns("www.example.com"))
			req.CertificateProfile = tc.profile
			leaf := issue(t, s, req)[0] // zlint-checked
			if !slices.Equal(leaf.ExtKeyUsage, tc.wantEKU) || len(leaf.UnknownExtKeyUsage) > 0 {
				t.Errorf("ExtKeyUsage = %v %v, want %v", leaf.ExtKeyUsage, leaf.UnknownExtKeyUsage, tc.wantEKU)
			}
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, tc.wantCN)
			}
			if tc.wantCN == "" && len(leaf.RawSubject) > 2 {
				t.Errorf("subject = %v, want empty", leaf.Subject)
			}
		})
	}
}

func TestCommonNameIsOneOfTheOrdersNamesOrNone(t *testing.T) {
	ca := defaultCA(t)
	s := newSigner(t, ca.source(), Options{})
	long := strings.Repeat("a", 60) + ".example.com" // 72 characters
	tests := []struct {
		name   string
		csrCN  string
		ids    []acme.Identifier
		wantCN string
	}{
		{"ok/the CSR's CN is kept when it is one of the order's names, spelled as the order spells it",
			"B.Example.COM", []acme.Identifier{dns("a.example.com"), dns("b.example.com")}, "b.example.com"},
		{"ok/a CSR CN outside the order falls back to the first DNS name",
			"evil.example.com", []acme.Identifier{ip("10.0.0.1"), dns("a.example.com")}, "a.example.com"},
		{"ok/a CSR without a CN gets the first DNS name",
			"", []acme.Identifier{dns("a.example.com"), dns("b.example.com")}, "a.example.com"},
		{"ok/a name too long for a CN is skipped for the next DNS name",
			long, []acme.Identifier{dns(long), dns("short.example.com")}, "short.example.com"},
		{"ok/an IPv6 CN in another spelling is written as the order's identifier",
			"2001:DB8:0:0::1", []acme.Identifier{ip("2001:db8::1")}, "2001:db8::1"},
		{"ok/an IP-only order whose CSR has no CN gets an empty subject",
			"", []acme.Identifier{ip("10.0.0.1")}, ""},
		{"ok/an order whose names are all too long gets an empty subject",
			"", []acme.Identifier{dns(long)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			csr := newCSR(t, newKey(t, "p256"), &x509.CertificateRequest{Subject: pkix.Name{CommonName: tc.csrCN}})
			leaf := issue(t, s, signer.IssueRequest{OrderID: "o", CSR: csr, Identifiers: tc.ids})[0]
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, tc.wantCN)
			}
			if tc.wantCN != "" {
				return
			}
			if len(leaf.Subject.Names) != 0 {
				t.Errorf("subject = %q, want it empty", leaf.Subject)
			}
			// RFC 5280 §4.2.1.6: with an empty subject the SAN is critical.
			for _, ext := range leaf.Extensions {
				if ext.Id.Equal(oidSAN) && !ext.Critical {
					t.Errorf("subjectAltName is not critical in a leaf with an empty subject")
				}
			}
		})
	}
}

var (
	oidSAN         = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidCRLDP       = asn1.ObjectIdentifier{2, 5, 29, 31}
	oidCustom      = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 55555, 1}
	leafExtensions = []string{
		"2.5.29.14", // subjectKeyIdentifier
		"2.5.29.15", // keyUsage
		"2.5.29.17", // subjectAltName
		"2.5.29.19", // basicConstraints
		"2.5.29.35", // authorityKeyIdentifier
		"2.5.29.37", // extKeyUsage
	}
)

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatalf("asn1.Marshal: %v", err)
	}
	return b
}

func TestCSRExtensionsAreIgnored(t *testing.T) {
	ca := defaultCA(t)
	s := newSigner(t, ca.source(), Options{})
	ids := []acme.Identifier{dns("www.example.com")}
	tests := []struct {
		name  string
		csr   func(t *testing.T) *x509.CertificateRequest
		check func(t *testing.T, leaf *x509.Certificate)
	}{
		{"ok/a CSR asking for CA:true gets a leaf with cA false",
			func(t *testing.T) *x509.CertificateRequest {
				bc := struct{ IsCA bool }{true}
				return &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
					{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: mustMarshal(t, bc)}}}
			},
			func(t *testing.T, leaf *x509.Certificate) {
				if leaf.IsCA {
					t.Errorf("leaf is a CA")
				}
			}},
		{"ok/a CSR asking for certSign gets only digitalSignature",
			func(t *testing.T) *x509.CertificateRequest {
				ku := asn1.BitString{Bytes: []byte{0x86}, BitLength: 7} // digitalSignature, keyCertSign, cRLSign
				return &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
					{Id: asn1.ObjectIdentifier{2, 5, 29, 15}, Critical: true, Value: mustMarshal(t, ku)}}}
			},
			func(t *testing.T, leaf *x509.Certificate) {
				if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
					t.Errorf("KeyUsage = %b, want digitalSignature only", leaf.KeyUsage)
				}
			}},
		{"ok/a CSR asking for more EKUs gets serverAuth only",
			func(t *testing.T) *x509.CertificateRequest {
				ekus := []asn1.ObjectIdentifier{
					{1, 3, 6, 1, 5, 5, 7, 3, 1}, {1, 3, 6, 1, 5, 5, 7, 3, 2}, {1, 3, 6, 1, 5, 5, 7, 3, 3}, oidCustom}
				return &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
					{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Value: mustMarshal(t, ekus)}}}
			},
			func(t *testing.T, leaf *x509.Certificate) {
				if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(leaf.UnknownExtKeyUsage) > 0 {
					t.Errorf("ExtKeyUsage = %v %v, want serverAuth only", leaf.ExtKeyUsage, leaf.UnknownExtKeyUsage)
				}
			}},
		{"ok/a CSR naming more than the order gets the order's names only",
			func(t *testing.T) *x509.CertificateRequest {
				u, _ := url.Parse("https://evil.example.com/")
				return &x509.CertificateRequest{
					DNSNames:       []string{"www.example.com", "evil.example.com"},
					IPAddresses:    []net.IP{net.ParseIP("10.9.9.9")},
					EmailAddresses: []string{"root@example.com"},
					URIs:           []*url.URL{u},
				}
			},
			func(t *testing.T, leaf *x509.Certificate) {
				if !slices.Equal(leaf.DNSNames, []string{"www.example.com"}) || len(leaf.IPAddresses)+len(leaf.EmailAddresses)+len(leaf.URIs) > 0 {
					t.Errorf("SAN = %q %v %q %v, want www.example.com only", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, leaf.URIs)
				}
			}},
		{"ok/a CSR with a custom extension gets a leaf without it",
			func(t *testing.T) *x509.CertificateRequest {
				return &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
					{Id: oidCustom, Value: mustMarshal(t, "please")}}}
			},
			func(*testing.T, *x509.Certificate) {}}, // the extension list check below covers it
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			csr := newCSR(t, newKey(t, "p256"), tc.csr(t))
			leaf := issue(t, s, signer.IssueRequest{OrderID: "o", CSR: csr, Identifiers: ids})[0]
			tc.check(t, leaf)
			var got []string
			for _, ext := range leaf.Extensions {
				got = append(got, ext.Id.String())
			}
			slices.Sort(got)
			if !slices.Equal(got, leafExtensions) {
				t.Errorf("leaf extensions = %v, want %v", got, leafExtensions)
			}
		})
	}
}

func TestSerialsAreUniquePositiveAndAtMost20Octets(t *testing.T) {
	ca := defaultCA(t)
	s := newSigner(t, ca.source(), Options{})
	req := issueRequest(t, newKey(t, "p256"), dns("www.example.com"))
	const workers, each = 8, 40
	serials := make(chan string, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				out, err := s.Issue(t.Context(), req)
				if err != nil {
					t.Errorf("Issue: %v", err)
					return
				}
				leaf, err := x509.ParseCertificate(out.Chain[0])
				if err != nil {
					t.Errorf("parsing leaf: %v", err)
					return
				}
				n := leaf.SerialNumber
				if n.Sign() <= 0 {
					t.Errorf("serial %v is not positive", n)
				}
				if der, err := asn1.Marshal(n); err != nil || len(der)-2 > 20 {
					t.Errorf("serial %x takes %d octets, more than 20 (RFC 5280 §4.1.2.2)", n, len(der)-2)
				}
				serials <- n.String()
			}
		})
	}
	wg.Wait()
	close(serials)
	seen := map[string]bool{}
	for n := range serials {
		if seen[n] {
			t.Errorf("serial %s issued twice", n)
		}
		seen[n] = true
	}
	if len(seen) != workers*each {
		t.Errorf("%d unique serials, want %d", len(seen), workers*each)
	}
}

func TestTheLeafIsValidExactlyForTheWindowAskedForOrIsRefused(t *testing.T) {
	T, day := testNow, 24*time.Hour
	start := T.Add(-time.Minute) // the default notBefore
	defaultEnd := start.Add(DefaultLifetime - time.Second)
	tests := []struct {
		name           string
		now            time.Time // default T
		caFrom, caTo   time.Time // default T-1y, T+1y
		lifetime       time.Duration
		profile        time.Duration // the certificate profile's lifetime; 0 for no profile
		reqNB, reqNA   time.Time
		wantNB, wantNA time.Time
		wantKind       signer.Kind
	}{
		{name: "ok/default lifetime is seven days counted inclusively, starting a minute ago",
			wantNB: start, wantNA: defaultEnd},
		{name: "ok/a configured lifetime replaces the default", lifetime: day,
			wantNB: start, wantNA: start.Add(day - time.Second)},
		{name: "ok/a certificate profile's shorter lifetime narrows the end", profile: day,
			wantNB: start, wantNA: start.Add(day - time.Second)},
		{name: "ok/a certificate profile's longer lifetime does not widen the signer's", lifetime: 2 * day, profile: 30 * day,
			wantNB: start, wantNA: start.Add(2*day - time.Second)},
		{name: "ok/an end left to the signer does not outlive the issuer", profile: day, caTo: T.Add(time.Hour),
			wantNB: start, wantNA: T.Add(time.Hour)},
		{name: "ok/a requested notAfter is the leaf's", reqNA: T.Add(2 * day),
			wantNB: start, wantNA: T.Add(2 * day)},
		{name: "ok/a requested notBefore is the leaf's and the lifetime runs from it", reqNB: T.Add(time.Hour),
			wantNB: T.Add(time.Hour), wantNA: T.Add(time.Hour + DefaultLifetime - time.Second)},
		{name: "ok/a requested notBefore two days ahead is honoured", reqNB: T.Add(2 * day),
			wantNB: T.Add(2 * day), wantNA: T.Add(2*day + DefaultLifetime - time.Second)},
		{name: "fail/a requested notBefore more than two days ahead is refused (BRs §7.1.2.7)", reqNB: T.Add(2*day + time.Second),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notBefore a year ahead is refused, the issuer's validity notwithstanding", reqNB: T.AddDate(0, 11, 0),
			wantKind: signer.KindBadValidity},
		{name: "ok/a requested window of exactly the lifetime is the leaf's", reqNB: T, reqNA: T.Add(DefaultLifetime - time.Second),
			wantNB: T, wantNA: T.Add(DefaultLifetime - time.Second)},
		{name: "ok/a requested notAfter a whole lifetime from now starts the leaf now, not a minute ago", reqNA: T.Add(DefaultLifetime - time.Second),
			wantNB: T, wantNA: T.Add(DefaultLifetime - time.Second)},
		{name: "ok/a requested notAfter half a minute short of a lifetime backdates the leaf half a minute", reqNA: T.Add(DefaultLifetime - 31*time.Second),
			wantNB: T.Add(-30 * time.Second), wantNA: T.Add(DefaultLifetime - 31*time.Second)},
		{name: "ok/a start left to the signer is no earlier than the issuer's notBefore", caFrom: T.Add(-10 * time.Second),
			wantNB: T.Add(-10 * time.Second), wantNA: defaultEnd},
		{name: "ok/fractions of a second are rounded inward", now: T.Add(500 * time.Millisecond), reqNA: T.Add(2*day + 700*time.Millisecond),
			wantNB: start.Add(time.Second), wantNA: T.Add(2 * day)},
		{name: "fail/a requested window longer than the lifetime is refused, not narrowed", reqNB: T.Add(-time.Minute), reqNA: T.Add(30 * day),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested window one second longer than the lifetime is refused", reqNB: T, reqNA: T.Add(DefaultLifetime),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notAfter beyond a certificate profile's lifetime is refused", profile: day, reqNA: T.Add(2 * day),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notAfter past the issuer's end is refused, not capped", caTo: T.Add(2 * day), reqNA: T.Add(3 * day),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notBefore before the issuer's start is refused", caFrom: T.Add(-10 * time.Second), reqNB: T.Add(-time.Minute),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notAfter in the past is refused", reqNA: T.Add(-time.Hour),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notBefore after the issuer expires is refused", caTo: T.Add(day), reqNB: T.Add(2 * day),
			wantKind: signer.KindBadValidity},
		{name: "fail/a requested notAfter before the requested notBefore is refused", reqNB: T.Add(2 * day), reqNA: T.Add(day),
			wantKind: signer.KindBadValidity},
		{name: "fail/an expired issuer is unavailable", caTo: T.Add(-time.Second),
			wantKind: signer.KindUnavailable},
		{name: "fail/an issuer not valid yet is unavailable", caFrom: T.Add(time.Hour),
			wantKind: signer.KindUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now, caFrom, caTo := cmp.Or(tc.now, T), cmp.Or(tc.caFrom, T.AddDate(-1, 0, 0)), cmp.Or(tc.caTo, T.AddDate(1, 0, 0))
			ca := newTestCA(t, caFrom, caTo)
			s := newSigner(t, ca.source(), Options{Lifetime: tc.lifetime, Clock: clocktest.New(now)})
			req := issueRequest(t, newKey(t, "p256"), dns("www.example.com"))
			req.NotBefore, req.NotAfter = tc.reqNB, tc.reqNA
			if tc.profile != 0 {
				req.CertificateProfile = &signer.CertificateProfile{Name: "p", Lifetime: tc.profile}
			}
			if tc.wantKind != 0 {
				_, err := s.Issue(t.Context(), req)
				if e, ok := signer.AsError(err); !ok || e.Kind != tc.wantKind {
					t.Fatalf("Issue error = %v, want a *signer.Error of kind %d", err, tc.wantKind)
				}
				return
			}
			leaf := issue(t, s, req)[0]
			if !leaf.NotBefore.Equal(tc.wantNB) || !leaf.NotAfter.Equal(tc.wantNA) {
				t.Errorf("validity = %v … %v, want %v … %v", leaf.NotBefore, leaf.NotAfter, tc.wantNB, tc.wantNA)
			}
		})
	}
}

func TestAWindowTheSignerWouldNotIssueIsRefusedAtNewOrder(t *testing.T) {
	T, day := testNow, 24*time.Hour
	tests := []struct {
		name         string
		profile      time.Duration
		caTo         time.Time // the issuing CA's end; default T+1y
		reqNB, reqNA time.Time
		wantDetail   string // "" for accepted
	}{
		{name: "fail/a notAfter past the issuing CA's end", caTo: T.Add(2 * day), reqNA: T.Add(3 * day), wantDetail: "after the issuing CA's own end"},
		{name: "ok/a notAfter within the issuing CA's end", caTo: T.Add(2 * day), reqNA: T.Add(day)},
		{name: "ok/a notBefore a minute past, for a client whose clock is behind", reqNB: T.Add(-time.Minute)},
		{name: "ok/a notAfter within the lifetime", reqNA: T.Add(6 * day)},
		{name: "ok/a window of exactly the lifetime", reqNB: T.Add(time.Hour), reqNA: T.Add(time.Hour + DefaultLifetime - time.Second)},
		{name: "fail/a notBefore an hour past", reqNB: T.Add(-time.Hour), wantDetail: "more than 5m0s in the past"},
		{name: "ok/a notBefore two days ahead", reqNB: T.Add(2 * day)},
		{name: "fail/a notBefore more than two days ahead", reqNB: T.Add(2*day + time.Second), wantDetail: "more than 48h0m0s ahead"},
		{name: "fail/a window a year ahead", reqNB: T.AddDate(0, 11, 0), reqNA: T.AddDate(0, 11, 6), wantDetail: "more than 48h0m0s ahead"},
		{name: "fail/a window longer than the lifetime", reqNB: T, reqNA: T.Add(30 * day), wantDetail: "valid for at most 168h0m0s"},
		{name: "fail/a notAfter beyond the certificate profile's lifetime", profile: day, reqNA: T.Add(2 * day), wantDetail: "valid for at most 24h0m0s"},
		{name: "fail/a notAfter before notBefore", reqNB: T.Add(2 * day), reqNA: T.Add(day), wantDetail: "is before notBefore"},
		// A span past time.Duration's 292 years is said as such, not wrapped
		// to a negative one.
		{name: "fail/a notAfter in year 9999", reqNA: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
			wantDetail: "would be valid for more than 292 years; this profile issues certificates valid for at most 168h0m0s"},
		{name: "fail/a window of a week and a second", reqNB: T, reqNA: T.Add(DefaultLifetime),
			wantDetail: "would be valid for 168h0m1s; this profile issues certificates valid for at most 168h0m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSigner(t, newTestCA(t, T.AddDate(-1, 0, 0), cmp.Or(tc.caTo, T.AddDate(1, 0, 0))).source(), Options{Clock: clocktest.New(T)})
			var cp *signer.CertificateProfile
			if tc.profile != 0 {
				cp = &signer.CertificateProfile{Name: "p", Lifetime: tc.profile}
			}
			err := s.CheckValidity(t.Context(), tc.reqNB, tc.reqNA, cp)
			if tc.wantDetail == "" {
				if err != nil {
					t.Fatalf("CheckValidity = %v; want nil", err)
				}
				return
			}
			e, ok := signer.AsError(err)
			if !ok || e.Kind != signer.KindBadValidity || !strings.Contains(e.Detail, tc.wantDetail) {
				t.Fatalf("CheckValidity = %v; want KindBadValidity saying %q", err, tc.wantDetail)
			}
		})
	}
}

func TestCRLDistributionPointIsPresentOnlyWhenConfigured(t *testing.T) {
	ca := defaultCA(t)
	tests := []struct {
		name   string
		crlURL string
	}{
		{"ok/configured: the leaf points at its CA's own CRL below the URL", "http://ca.example.com/acme/crl"},
		{"ok/not configured: the leaf has no distribution point", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSigner(t, ca.source(), Options{CRLURL: tc.crlURL})
			leaf := issue(t, s, issueRequest(t, newKey(t, "p256"), dns("www.example.com")))[0]
			var want []string
			if tc.crlURL != "" {
				want = []string{tc.crlURL + "/" + hex.EncodeToString(ca.inter.SubjectKeyId)}
			}
			if !slices.Equal(leaf.CRLDistributionPoints, want) {
				t.Errorf("CRLDistributionPoints = %q, want %q", leaf.CRLDistributionPoints, want)
			}
			has := slices.ContainsFunc(leaf.Extensions, func(e pkix.Extension) bool { return e.Id.Equal(oidCRLDP) })
			if has != (tc.crlURL != "") {
				t.Errorf("cRLDistributionPoints extension present = %v, want %v", has, tc.crlURL != "")
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	src := defaultCA(t).source()
	tests := []struct {
		name    string
		src     Source
		opts    Options
		wantErr string // "" for success
	}{
		{"ok/zero options", src, Options{}, ""},
		{"ok/an http CRL URL", src, Options{CRLURL: "http://ca.example.com/crl"}, ""},
		{"fail/no source", nil, Options{}, "no issuer source"},
		{"fail/a negative lifetime", src, Options{Lifetime: -time.Hour}, "lifetime"},
		{"fail/a lifetime the backdate would use up", src, Options{Lifetime: time.Minute}, "lifetime"},
		{"fail/an https CRL URL", src, Options{CRLURL: "https://ca.example.com/crl"}, "crl url"},
		{"fail/a relative CRL URL", src, Options{CRLURL: "/crl"}, "crl url"},
		{"fail/an unparsable CRL URL", src, Options{CRLURL: "http://[::1"}, "crl url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.src, tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if s.lifetime != cmp.Or(tc.opts.Lifetime, DefaultLifetime) || s.clock == nil {
					t.Errorf("defaults not applied: lifetime %v, clock %v", s.lifetime, s.clock)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestIssueRefusesWhatItCannotSign(t *testing.T) {
	s := newSigner(t, defaultCA(t).source(), Options{})
	x25519, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := issueRequest(t, newKey(t, "p256"), dns("www.example.com"))
	// What certbot and lego --must-staple put in the CSR: the TLS
	// feature extension (RFC 7633) listing status_request (5).
	mustStaple := newCSR(t, newKey(t, "p256"), &x509.CertificateRequest{DNSNames: []string{"www.example.com"},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 24}, Value: mustMarshal(t, []int{5})}}})
	tests := []struct {
		name     string
		req      signer.IssueRequest
		wantKind signer.Kind // 0: a server fault, not a *signer.Error
	}{
		{"fail/an unknown identifier type is rejected",
			signer.IssueRequest{CSR: good.CSR, Identifiers: []acme.Identifier{{Type: "email", Value: "a@example.com"}}}, signer.KindRejectedIdentifier},
		{"fail/an ip identifier that is no address is rejected",
			signer.IssueRequest{CSR: good.CSR, Identifiers: []acme.Identifier{ip("300.1.1.1")}}, signer.KindRejectedIdentifier},
		{"fail/a key that cannot sign TLS is a bad CSR",
			signer.IssueRequest{CSR: &x509.CertificateRequest{PublicKey: x25519.PublicKey()}, Identifiers: good.Identifiers}, signer.KindBadCSR},
		{"fail/a CSR asking for OCSP Must-Staple is a bad CSR, since this CA has no OCSP responder",
			signer.IssueRequest{CSR: mustStaple, Identifiers: good.Identifiers}, signer.KindBadCSR},
		{"fail/a request without a CSR is a server fault",
			signer.IssueRequest{Identifiers: good.Identifiers}, 0},
		{"fail/a request without identifiers is a server fault",
			signer.IssueRequest{CSR: good.CSR}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Issue(t.Context(), tc.req)
			if err == nil {
				t.Fatal("Issue succeeded")
			}
			e, ok := signer.AsError(err)
			switch {
			case tc.wantKind == 0 && ok:
				t.Errorf("Issue error = %v, a refusal; want a server fault", err)
			case tc.wantKind != 0 && (!ok || e.Kind != tc.wantKind):
				t.Errorf("Issue error = %v, want a *signer.Error of kind %d", err, tc.wantKind)
			}
		})
	}
}

func TestIssueRefusesABrokenIssuer(t *testing.T) {
	ca := defaultCA(t)
	errSource := errors.New("pki app not ready")
	notCA := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "not a CA"}, NotBefore: testNow.AddDate(-1, 0, 0), NotAfter: testNow.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}, ca.inter, ca.interKey.Public(), ca.interKey)
	tests := []struct {
		name    string
		src     Source
		wantErr string
	}{
		{"fail/the source's error is passed on", func(context.Context) (Issuer, error) { return Issuer{}, errSource }, "pki app not ready"},
		{"fail/an empty chain", Static(nil, ca.interKey), "no issuing CA certificate"},
		{"fail/no key", Static(ca.chain(), nil), "no issuing CA key"},
		{"fail/a key that is not the CA's, as when a rotation lands between two reads", Static(ca.chain(), ca.rootKey), "does not match"},
		{"fail/a first certificate that is not a CA", Static([]*x509.Certificate{notCA, ca.inter, ca.root}, ca.interKey), "not a CA"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSigner(t, tc.src, Options{})
			_, err := s.Issue(t.Context(), issueRequest(t, newKey(t, "p256"), dns("www.example.com")))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Issue error = %v, want one mentioning %q", err, tc.wantErr)
			}
			if e, ok := signer.AsError(err); ok && e.Kind != signer.KindUnavailable {
				t.Errorf("Issue error = %v is a refusal; a broken issuer is a server fault", err)
			}
			if _, err := s.CAChain(t.Context()); err == nil {
				t.Errorf("CAChain succeeded with a broken issuer")
			}
		})
	}
	t.Run("fail/the source's error is wrapped", func(t *testing.T) {
		s := newSigner(t, tests[0].src, Options{})
		if _, err := s.Issuer(t.Context()); !errors.Is(err, errSource) {
			t.Errorf("Issuer error = %v, want it to wrap %v", err, errSource)
		}
	})
}

func TestAChainAndKeyReadApartDuringARenewalAreReadAgainBeforeSigning(t *testing.T) {
	old, renewed := defaultCA(t), defaultCA(t)
	var reads int
	// The first read catches the renewal half done: the new key beside the
	// old certificate. The second finds the renewed pair.
	src := func(context.Context) (Issuer, error) {
		reads++
		if reads == 1 {
			return Issuer{Chain: old.chain(), Key: renewed.interKey}, nil
		}
		return Issuer{Chain: renewed.chain(), Key: renewed.interKey}, nil
	}
	s := newSigner(t, src, Options{})
	out, err := s.Issue(t.Context(), issueRequest(t, newKey(t, "p256"), dns("www.example.com")))
	if err != nil {
		t.Fatalf("Issue across a renewal: %v", err)
	}
	renewed.verify(t, out.Chain[0], testNow)
	if reads != 2 {
		t.Errorf("the source was read %d times; want 2", reads)
	}
}

func TestAnIssuerThatStaysBrokenIsAFaultOfTheCANotAVerdict(t *testing.T) {
	ca := defaultCA(t)
	s := newSigner(t, Static(ca.chain(), ca.rootKey), Options{})
	_, err := s.Issue(t.Context(), issueRequest(t, newKey(t, "p256"), dns("www.example.com")))
	e, ok := signer.AsError(err)
	if !ok || e.Kind != signer.KindUnavailable {
		t.Fatalf("Issue error = %v; want a *signer.Error of KindUnavailable, so the order waits instead of failing", err)
	}
}

func TestChainLeavesOutOnlyASelfSignedRoot(t *testing.T) {
	ca := defaultCA(t)
	nb, na := testNow.AddDate(-1, 0, 0), testNow.AddDate(1, 0, 0)
	inter2Key := newKey(t, "p256")
	inter2 := createCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "Test Intermediate 2"}, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}, ca.inter, inter2Key.Public(), ca.interKey)
	// A CA renewing its key issues its new certificate under its own name
	// with the old key: self-issued, not self-signed, and not a root.
	rekeyedKey := newKey(t, "p256")
	rekeyed := createCert(t, &x509.Certificate{
		Subject: ca.root.Subject, NotBefore: nb, NotAfter: na,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}, ca.root, rekeyedKey.Public(), ca.rootKey)
	tests := []struct {
		name      string
		issuer    []*x509.Certificate
		key       crypto.Signer
		wantChain []*x509.Certificate // after the leaf
	}{
		{"ok/intermediate and root: the root is left out", ca.chain(), ca.interKey, []*x509.Certificate{ca.inter}},
		{"ok/intermediate alone", []*x509.Certificate{ca.inter}, ca.interKey, []*x509.Certificate{ca.inter}},
		{"ok/two intermediates and the root", []*x509.Certificate{inter2, ca.inter, ca.root}, inter2Key, []*x509.Certificate{inter2, ca.inter}},
		{"ok/a root signing leaves itself: the leaf alone", []*x509.Certificate{ca.root}, ca.rootKey, nil},
		{"ok/a self-issued CA under the root's name is kept", []*x509.Certificate{rekeyed, ca.root}, rekeyedKey, []*x509.Certificate{rekeyed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSigner(t, Static(tc.issuer, tc.key), Options{})
			chain := issue(t, s, issueRequest(t, newKey(t, "p256"), dns("www.example.com")))
			if got := chain[1:]; !slices.EqualFunc(got, tc.wantChain, (*x509.Certificate).Equal) {
				t.Errorf("chain after the leaf has %d certificates, want %d", len(got), len(tc.wantChain))
			}
			caChain, err := s.CAChain(t.Context())
			if err != nil {
				t.Fatalf("CAChain: %v", err)
			}
			if !slices.EqualFunc(caChain, tc.issuer, func(der []byte, c *x509.Certificate) bool { return bytes.Equal(der, c.Raw) }) {
				t.Errorf("CAChain has %d certificates, want the issuer's %d, root included", len(caChain), len(tc.issuer))
			}
		})
	}
}

func TestIssueSignsWithTheCurrentIssuerAfterARotation(t *testing.T) {
	ca := defaultCA(t)
	rotated := defaultCA(t)
	var mu sync.Mutex
	current := ca
	s := newSigner(t, func(context.Context) (Issuer, error) {
		mu.Lock()
		defer mu.Unlock()
		return Issuer{Chain: current.chain(), Key: current.interKey}, nil
	}, Options{})
	req := issueRequest(t, newKey(t, "p256"), dns("www.example.com"))

	ca.verify(t, issue(t, s, req)[0].Raw, testNow)
	mu.Lock()
	current = rotated
	mu.Unlock()
	rotated.verify(t, issue(t, s, req)[0].Raw, testNow)
}

func TestRevocationIsLeftToTheLedger(t *testing.T) {
	s := newSigner(t, defaultCA(t).source(), Options{})
	if got := s.RevocationRoute(); got != signer.RevokeInLedger {
		t.Errorf("RevocationRoute = %v, want RevokeInLedger", got)
	}
	reason := 1
	if err := s.Revoke(t.Context(), &x509.Certificate{}, &reason); err != nil {
		t.Errorf("Revoke = %v, want nil", err)
	}
}
