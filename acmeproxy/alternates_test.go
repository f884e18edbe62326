package acmeproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
)

// crossSignedSigner is the local CA offering, beside each chain it signs,
// an alternate one for the same leaf that ends at another issuer, as an
// upstream CA with a cross-signed intermediate does.
type crossSignedSigner struct {
	*localca.Signer
	cross []byte
}

func (s crossSignedSigner) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	out, err := s.Signer.Issue(ctx, req)
	if err == nil && len(out.Chain) > 0 {
		out.Alternates = [][][]byte{{out.Chain[0], s.cross}}
	}
	return out, err
}

// crossIssuer is a self-signed CA certificate standing for the issuer
// of an alternate chain.
func crossIssuer(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "Cross Root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestACertificatesAlternateChainIsLinkedFromItsDefaultOneAndServedAtItsOwnURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cross := crossIssuer(t)
	e := newTestEnvWith(t, envOptions{wrap: func(l *localca.Signer) signer.Signer {
		return crossSignedSigner{Signer: l, cross: cross}
	}})
	c, o, csr := readyOrder(t, ctx, e, "alt.example.com")
	ders, certURL, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
	if err != nil {
		t.Fatal(err)
	}
	raw := e.raw(c)
	def := raw.post(certURL, nil, jwsOpts{})
	if def.status != http.StatusOK || !slices.Contains(def.header.Values("Link"), "<"+certURL+"/1>;rel=\"alternate\"") {
		t.Fatalf("default chain: %d, Link %q; want 200 linking %s/1 as alternate", def.status, def.header.Values("Link"), certURL)
	}
	alt := raw.post(certURL+"/1", nil, jwsOpts{})
	if alt.status != http.StatusOK || alt.header.Get("Content-Type") != "application/pem-certificate-chain" {
		t.Fatalf("alternate chain: %d %s %s; want 200, a PEM chain", alt.status, alt.header.Get("Content-Type"), alt.body)
	}
	got := signer.ChainDERs(alt.body)
	if len(got) != 2 || !bytes.Equal(got[0], ders[0]) || !bytes.Equal(got[1], cross) {
		t.Fatalf("alternate chain of %d certificates; want the same leaf, then the cross issuer", len(got))
	}
	if !slices.Contains(alt.header.Values("Link"), "<"+certURL+">;rel=\"alternate\"") {
		t.Errorf("alternate chain's Link %q; want the default chain linked as alternate", alt.header.Values("Link"))
	}
	for _, n := range []string{"2", "0", "01", "x"} {
		if r := raw.post(certURL+"/"+n, nil, jwsOpts{}); r.status != http.StatusNotFound || r.problem == nil {
			t.Errorf("chain %q: %d %s; want a 404 problem", n, r.status, r.body)
		}
	}
}

func TestACertificateWithoutAlternatesLinksNone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	c, o, csr := readyOrder(t, ctx, e, "plain.example.com")
	_, certURL, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
	if err != nil {
		t.Fatal(err)
	}
	raw := e.raw(c)
	if r := raw.post(certURL, nil, jwsOpts{}); r.status != http.StatusOK || slices.ContainsFunc(r.header.Values("Link"), func(v string) bool {
		return bytes.Contains([]byte(v), []byte("alternate"))
	}) {
		t.Errorf("chain: %d, Link %q; want 200 and no alternate", r.status, r.header.Values("Link"))
	}
	if r := raw.post(certURL+"/1", nil, jwsOpts{}); r.status != http.StatusNotFound {
		t.Errorf("alternate 1 of a certificate with none: %d %s; want 404", r.status, r.body)
	}
}
