package relay

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"sync"
	"testing"
)

// topIssuer is the issuer named by the last certificate of a DER chain:
// the root a client trusting that chain must hold.
func topIssuer(t *testing.T, chain [][]byte) string {
	t.Helper()
	return mustParse(t, chain[len(chain)-1]).Issuer.String()
}

// relayedWithAlternates relays one order through b and returns its chain
// and the alternates recorded with it.
func relayedWithAlternates(t *testing.T, b *bench, name string) ([][]byte, [][][]byte) {
	t.Helper()
	ctx := context.Background()
	req := b.finalized(t, name)
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("relay of %s: %s", name, out)
	}
	b.settler.mu.Lock()
	defer b.settler.mu.Unlock()
	return b.settler.issued[req.OrderID], b.settler.alternates[req.OrderID]
}

func TestARelayedCertificateComesWithEachAlternateChainTheUpstreamOffers(t *testing.T) {
	b := pebbleBenchOn(t, newPebbleUpstreamWithAlternates(t, 2))
	chain, alts := relayedWithAlternates(t, b, "alt.example.com")
	if len(alts) != 2 {
		t.Fatalf("%d alternate chains recorded; want the upstream's 2", len(alts))
	}
	roots := map[string]bool{topIssuer(t, chain): true}
	for i, alt := range alts {
		if !bytes.Equal(alt[0], chain[0]) {
			t.Errorf("alternate %d: its leaf is not the certificate's", i+1)
		}
		roots[topIssuer(t, alt)] = true
	}
	if len(roots) != 3 {
		t.Errorf("the chains end at %d distinct roots (%v); want 3, one each", len(roots), roots)
	}
}

func TestAnAlternateChainForAnotherLeafIsLeftOutAndTheCertificateStillIssued(t *testing.T) {
	up := newPebbleUpstreamWithAlternates(t, 2)
	var (
		mu        sync.Mutex
		downloads int
	)
	// The first alternate's answer loses its leaf: it starts with an
	// issuer instead.
	up.certs = func(t *testing.T, body []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		downloads++
		if downloads != 2 {
			return body
		}
		_, rest := pem.Decode(body)
		return rest
	}
	b := pebbleBenchOn(t, up)
	chain, alts := relayedWithAlternates(t, b, "mixed.example.com")
	if len(chain) < 2 {
		t.Fatalf("a chain of %d certificates; want the certificate issued", len(chain))
	}
	if len(alts) != 1 || !bytes.Equal(alts[0][0], chain[0]) {
		t.Fatalf("%d alternates recorded; want the one that is a chain for the leaf", len(alts))
	}
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
