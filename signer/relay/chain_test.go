package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"
)

// chainBlocks are the PEM blocks of a download, in its order.
func chainBlocks(t *testing.T, body []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for b, rest := pem.Decode(body); b != nil; b, rest = pem.Decode(rest) {
		out = append(out, b.Bytes)
	}
	if len(out) == 0 {
		t.Fatalf("the upstream's download holds no PEM block: %q", body)
	}
	return out
}

func joinPEM(ders [][]byte) []byte {
	var out []byte
	for _, der := range ders {
		out = append(out, pemOf(der)...)
	}
	return out
}

func TestABrokenChainTheUpstreamServesNeverReachesTheClient(t *testing.T) {
	tests := []struct {
		name          string
		intermediates int // in the upstream's chains
		// rewrite changes the chain's certificates (DER, leaf first).
		rewrite func(t *testing.T, ders [][]byte) [][]byte
		why     string // what the attempt's reason says
	}{
		{"an issuer that did not sign the leaf", 1, func(t *testing.T, ders [][]byte) [][]byte {
			return [][]byte{ders[0], newTestCA(t, "another CA").cert.Raw}
		}, "certificate 1 of the chain is not signed by certificate 2 (CN=another CA)"},
		{"its intermediates out of order", 2, func(t *testing.T, ders [][]byte) [][]byte {
			return [][]byte{ders[0], ders[2], ders[1]}
		}, "certificate 1 of the chain is not signed by certificate 2 (CN=Pebble Intermediate CA"},
		{"the leaf as its own issuer", 1, func(t *testing.T, ders [][]byte) [][]byte {
			return [][]byte{ders[0], ders[0]}
		}, "certificate 1 of the chain is not signed by certificate 2: x509: invalid signature: parent certificate cannot sign this kind of certificate"},
		{"an issuer that does not parse", 1, func(t *testing.T, ders [][]byte) [][]byte {
			return [][]byte{ders[0], []byte("not a certificate")}
		}, "certificate 2 of the chain does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			up := newPebbleUpstreamOf(t, pebbleKnobs{chainLength: tt.intermediates})
			b := pebbleBenchOn(t, up)
			up.certs = func(t *testing.T, body []byte) []byte { return joinPEM(tt.rewrite(t, chainBlocks(t, body))) }
			req := b.finalized(t, "leaf.example.com")
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			out := b.s.RunJob(ctx, b.job(t, req.OrderID))
			// Retried, not failed: the certificate is issued, and the next
			// attempt downloads it again rather than order another.
			if out.Kind() != "retry" || !strings.Contains(out.String(), "the upstream's certificate chain is broken: "+tt.why) {
				t.Fatalf("the attempt: %s; want retried, saying %q", out, tt.why)
			}
			b.settler.mu.Lock()
			defer b.settler.mu.Unlock()
			if chain, ok := b.settler.issued[req.OrderID]; ok {
				t.Errorf("the order was issued a chain of %d certificates; want none", len(chain))
			}
		})
	}
}

func TestAChainTheUpstreamServesWholeAgainIsIssuedAtTheNextAttempt(t *testing.T) {
	ctx := context.Background()
	up := newPebbleUpstream(t)
	b := pebbleBenchOn(t, up)
	up.certs = func(t *testing.T, body []byte) []byte {
		ders := chainBlocks(t, body)
		return joinPEM([][]byte{ders[0], newTestCA(t, "another CA").cert.Raw})
	}
	req := b.finalized(t, "again.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)); out.Kind() != "retry" {
		t.Fatalf("the first attempt: %s; want retried", out)
	}
	up.mu.Lock()
	up.certs = nil
	up.mu.Unlock()
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("the second attempt: %s; want done", out)
	}
	if n := up.count("POST order-plz"); n != 1 {
		t.Errorf("Pebble saw %d newOrders; want 1, the issued certificate downloaded again", n)
	}
	b.settler.mu.Lock()
	defer b.settler.mu.Unlock()
	if chain := b.settler.issued[req.OrderID]; len(chain) != 2 || checkLinks(chain) != nil {
		t.Errorf("the order was issued a chain of %d certificates (%v); want the leaf and its issuer", len(chain), checkLinks(chain))
	}
}

func TestABrokenAlternateChainIsLeftOutAndTheCertificateStillIssued(t *testing.T) {
	up := newPebbleUpstreamWithAlternates(t, 2)
	var (
		mu        sync.Mutex
		downloads int
	)
	// The first alternate's answer has its issuer swapped for a CA that
	// did not sign the leaf.
	up.certs = func(t *testing.T, body []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		downloads++
		if downloads != 2 {
			return body
		}
		ders := chainBlocks(t, body)
		return joinPEM([][]byte{ders[0], newTestCA(t, "another CA").cert.Raw})
	}
	b := pebbleBenchOn(t, up)
	chain, alts := relayedWithAlternates(t, b, "broken-alt.example.com")
	if len(chain) < 2 {
		t.Fatalf("a chain of %d certificates; want the certificate issued", len(chain))
	}
	if len(alts) != 1 || !bytes.Equal(alts[0][0], chain[0]) || checkLinks(alts[0]) != nil {
		t.Fatalf("%d alternates recorded; want the one whose issuer signed the leaf", len(alts))
	}
}

func TestALinkAboveTheIssuerSignedWithSHA1IsPassedOnUnchecked(t *testing.T) {
	// A chain ending in an old cross-sign toward a legacy root, signed
	// with SHA-1, which crypto/x509 no longer verifies: a peer trusting
	// the newer root stops before it, so the chain is served as it is.
	rootKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "legacy root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root := mustParse(t, rootDER)
	issuer := newTestCA(t, "newer root")
	crossTmpl := *issuer.cert
	crossTmpl.SignatureAlgorithm = x509.SHA1WithRSA
	crossDER, err := x509.CreateCertificate(rand.Reader, &crossTmpl, root, issuer.key.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, up := pebbleBench(t)
	up.certs = func(t *testing.T, body []byte) []byte {
		leaf := mustParse(t, chainBlocks(t, body)[0])
		der, err := x509.CreateCertificate(rand.Reader, leaf, issuer.cert, leaf.PublicKey, issuer.key)
		if err != nil {
			t.Fatal(err)
		}
		return joinPEM([][]byte{der, crossDER, rootDER})
	}
	req := b.finalized(t, "legacy.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("relay: %s; want done", out)
	}
	b.settler.mu.Lock()
	defer b.settler.mu.Unlock()
	if chain := b.settler.issued[req.OrderID]; len(chain) != 3 {
		t.Errorf("the order was issued a chain of %d certificates; want the upstream's 3", len(chain))
	}
}

func TestALeafSignedWithSHA1IsNotPassedOn(t *testing.T) {
	ctx := context.Background()
	issuerKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "RSA CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	issuerDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, issuerKey.Public(), issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	issuer := mustParse(t, issuerDER)
	b, up := pebbleBench(t)
	up.certs = func(t *testing.T, body []byte) []byte {
		leaf := mustParse(t, chainBlocks(t, body)[0])
		leaf.SignatureAlgorithm = x509.SHA1WithRSA
		der, err := x509.CreateCertificate(rand.Reader, leaf, issuer, leaf.PublicKey, issuerKey)
		if err != nil {
			t.Fatal(err)
		}
		return joinPEM([][]byte{der, issuerDER})
	}
	req := b.finalized(t, "sha1.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)); out.Kind() != "retry" || !strings.Contains(out.String(), "insecure algorithm SHA1-RSA") {
		t.Fatalf("the attempt: %s; want retried, the leaf's signature unverifiable", out)
	}
}
