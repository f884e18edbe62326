package localca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"maps"
	"math/big"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/lintcheck"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// testNow is the fake clock's start in every test. It is after 2026-03-15,
// when the BRs' "short-lived" limit dropped to seven days.
var testNow = time.Date(2026, time.October, 1, 12, 0, 0, 0, time.UTC)

// leafLints returns the lints accepted for the leaf issued for req.
func leafLints(req signer.IssueRequest) map[string]string {
	accept := maps.Clone(lintcheck.PrivateCA)
	if slices.ContainsFunc(req.Identifiers, func(id acme.Identifier) bool { return id.Type == "ip" }) {
		maps.Copy(accept, lintcheck.ReservedIP)
	}
	if _, ok := req.CSR.PublicKey.(ed25519.PublicKey); ok {
		maps.Copy(accept, lintcheck.Ed25519)
	}
	return accept
}

// testCA is a root and an intermediate below it, both ECDSA P-256.
type testCA struct {
	root, inter       *x509.Certificate
	rootKey, interKey crypto.Signer
}

// newTestCA returns a CA whose intermediate is valid from notBefore to
// notAfter; the root is valid a year longer either way.
func newTestCA(t testing.TB, notBefore, notAfter time.Time) *testCA {
	t.Helper()
	ca := &testCA{rootKey: newKey(t, "p256"), interKey: newKey(t, "p256")}
	ca.root = createCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Test Root", Organization: []string{"caddy-acme-proxy tests"}},
		NotBefore:             notBefore.AddDate(-1, 0, 0),
		NotAfter:              notAfter.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil, ca.rootKey.Public(), ca.rootKey)
	ca.inter = createCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Test Intermediate", Organization: []string{"caddy-acme-proxy tests"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}, ca.root, ca.interKey.Public(), ca.rootKey)
	return ca
}

// defaultCA returns a CA valid from a year before testNow to a year after.
func defaultCA(t testing.TB) *testCA {
	return newTestCA(t, testNow.AddDate(-1, 0, 0), testNow.AddDate(1, 0, 0))
}

// chain is the issuer chain as Caddy's pki CA source gives it.
func (ca *testCA) chain() []*x509.Certificate { return []*x509.Certificate{ca.inter, ca.root} }

func (ca *testCA) source() Source { return Static(ca.chain(), ca.interKey) }

// verify checks that leafDER chains to the root through the intermediate
// for server authentication at now, and returns the parsed leaf.
func (ca *testCA) verify(t testing.TB, leafDER []byte, now time.Time) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		t.Fatalf("parsing leaf: %v", err)
	}
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(ca.root)
	inters.AddCert(ca.inter)
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inters,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Fatalf("leaf does not chain to the test root: %v", err)
	}
	return leaf
}

// createCert signs tmpl with key under parent (self-signed when parent is
// nil), with a random serial.
func createCert(t testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) *x509.Certificate {
	t.Helper()
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatalf("creating test certificate %q: %v", tmpl.Subject, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing test certificate %q: %v", tmpl.Subject, err)
	}
	return c
}

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

// newKey returns a fresh key of kind "p256", "p384" or "ed25519", or the
// package's one RSA 2048 key for "rsa2048" (generating RSA keys is slow).
func newKey(t testing.TB, kind string) crypto.Signer {
	t.Helper()
	var (
		key crypto.Signer
		err error
	)
	switch kind {
	case "p256":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p384":
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "rsa2048":
		rsaOnce.Do(func() { rsaKey, err = rsa.GenerateKey(rand.Reader, 2048) })
		key = rsaKey
	default:
		t.Fatalf("unknown key kind %q", kind)
	}
	if err != nil {
		t.Fatalf("generating %s key: %v", kind, err)
	}
	return key
}

// newCSR signs tmpl with key; a nil tmpl asks for nothing at all.
func newCSR(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) *x509.CertificateRequest {
	t.Helper()
	if tmpl == nil {
		tmpl = &x509.CertificateRequest{}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatalf("creating CSR: %v", err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatalf("parsing CSR: %v", err)
	}
	return csr
}

func dns(v string) acme.Identifier { return acme.Identifier{Type: "dns", Value: v} }
func ip(v string) acme.Identifier  { return acme.Identifier{Type: "ip", Value: v} }

// issueRequest is an order for ids whose CSR, made with key, names them all
// and takes its CN from the first.
func issueRequest(t testing.TB, key crypto.Signer, ids ...acme.Identifier) signer.IssueRequest {
	t.Helper()
	tmpl := &x509.CertificateRequest{}
	for _, id := range ids {
		switch id.Type {
		case "dns":
			tmpl.DNSNames = append(tmpl.DNSNames, id.Value)
		case "ip":
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(id.Value))
		}
	}
	if len(ids) > 0 {
		tmpl.Subject.CommonName = ids[0].Value
	}
	csr := newCSR(t, key, tmpl)
	return signer.IssueRequest{OrderID: "order-1", Profile: "default", CSR: csr, CSRDER: csr.Raw, Identifiers: ids}
}

// issue signs req and returns the parsed chain, failing t on any error.
func issue(t testing.TB, s *Signer, req signer.IssueRequest) []*x509.Certificate {
	t.Helper()
	out, err := s.Issue(t.Context(), req)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	if out.Pending {
		t.Fatalf("Issue answered Pending; a local CA signs at once")
	}
	if len(out.Chain) == 0 {
		t.Fatalf("Issue returned an empty chain")
	}
	chain := make([]*x509.Certificate, len(out.Chain))
	for i, der := range out.Chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatalf("parsing chain[%d]: %v", i, err)
		}
		chain[i] = c
	}
	lintcheck.Certificate(t, out.Chain[0], leafLints(req))
	return chain
}
