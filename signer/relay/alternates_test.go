package relay

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/wfe"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
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

func TestAnUpstreamLinkingThousandsOfAlternateChainsThatFailCostsOnlyAFewRequestsAndOneLineForTheRest(t *testing.T) {
	const offered = 500
	up := newPebbleUpstreamWithAlternates(t, 0)
	up.certHeader = func(code int, h http.Header) {
		if code != http.StatusOK {
			return // an answer to one of the broken links
		}
		// Longer than any CA's: never asked.
		h.Add("Link", fmt.Sprintf(`<%s/certZ/%s>;rel="alternate"`, up.srv.URL, strings.Repeat("x", maxUpstreamURL)))
		for i := range offered {
			// Pebble knows none of them: each download fails. Some
			// are sent twice.
			h.Add("Link", fmt.Sprintf(`<%s/certZ/gone-%d>;rel="alternate"`, up.srv.URL, i%(offered-10)))
		}
	}
	core, logs := observer.New(zap.DebugLevel)
	db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b := benchLogging(t, db, clocktest.New(time.Now()), &fakeSettler{issued: map[string][][]byte{}, failed: map[string][]string{}},
		zap.New(core), up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
			o.Transport = up.srv.Client().Transport
			o.FinalizeWait = -1
		})
	chain, alts := relayedWithAlternates(t, b, "many-alts.example.com")
	if len(chain) < 2 || len(alts) != 0 {
		t.Fatalf("a chain of %d certificates and %d alternates; want the certificate issued without any", len(chain), len(alts))
	}
	if n := up.count("POST certZ"); n > 1+maxAlternateTries {
		t.Errorf("%d certificate downloads for %d alternate links; want the chain's and at most %d more", n, offered, maxAlternateTries)
	}
	skipped := logs.FilterField(zap.String("event", "relay_alternate_skipped")).Len()
	untried := logs.FilterField(zap.String("event", "relay_alternates_untried")).All()
	if skipped > maxAlternateTries || len(untried) != 1 {
		t.Fatalf("%d lines for alternates left out and %d for those untried; want at most %d and 1", skipped, len(untried), maxAlternateTries)
	}
	for _, e := range logs.FilterField(zap.String("event", "relay_alternate_skipped")).All() {
		if u, _ := e.ContextMap()["url"].(string); len(u) > maxUpstreamURL {
			t.Errorf("an alternate at a URL of %d bytes was tried", len(u))
		}
	}
	if got := untried[0].ContextMap()["offered"]; got != int64(offered-10) {
		t.Errorf("the line says %v alternates offered; want the %d distinct ones", got, offered-10)
	}
}
