package caddyacmeproxy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/lego"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// relayLeaf is the leaf of a lego certificate resource.
func relayLeaf(t *testing.T, res *certificate.Resource) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(res.Certificate)
	if b == nil {
		t.Fatal("the certificate resource holds no PEM")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// setWindow sets Pebble's renewalInfo answer for leaf, as its management
// API's set-renewal-info does.
func (p *relayPebble) setWindow(t *testing.T, leaf *x509.Certificate, start, end time.Time, explanationURL string) {
	t.Helper()
	var ari struct {
		SuggestedWindow struct {
			Start time.Time `json:"start"`
			End   time.Time `json:"end"`
		} `json:"suggestedWindow"`
		ExplanationURL string `json:"explanationURL,omitempty"`
	}
	ari.SuggestedWindow.Start, ari.SuggestedWindow.End, ari.ExplanationURL = start, end, explanationURL
	raw, err := json.Marshal(ari)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.store.SetARIResponse(leaf.SerialNumber, string(raw)); err != nil {
		t.Fatalf("setting Pebble's window: %v", err)
	}
}

// relayARIBench is a relay profile over a Pebble with, or without,
// renewal information, and a lego client of the proxy.
type relayARIBench struct {
	*relayBench
	ctx  context.Context
	lego *lego.Client
	proc *relayProcess
}

func newRelayARIBench(t *testing.T, ctx context.Context, upstreamARI bool) *relayARIBench {
	t.Helper()
	b := newRelayBench(t)
	// Before the signer reads the directory: it keeps what it offers for
	// minutes (signer/relay/directory.go).
	b.pebble.noARI.Store(!upstreamARI)
	p := b.start()
	return &relayARIBench{relayBench: b, ctx: ctx, lego: newRelayLego(t, ctx, p.dirURL, p.ts.Client(), b.dns), proc: p}
}

func (b *relayARIBench) obtain(t *testing.T, name string) (*certificate.Resource, *x509.Certificate) {
	t.Helper()
	res, err := b.lego.Certificate.Obtain(b.ctx, certificate.ObtainRequest{Domains: []string{name}, Bundle: true, KeyType: certcrypto.EC256})
	if err != nil {
		t.Fatalf("lego Obtain %s: %v", name, err)
	}
	return res, relayLeaf(t, res)
}

// renew renews res naming it in "replaces" and returns the "replaces" of
// the newOrders Pebble received meanwhile.
func (b *relayARIBench) renew(t *testing.T, res *certificate.Resource) []string {
	t.Helper()
	before := len(b.pebble.newOrderReplaces())
	if _, err := b.lego.Certificate.Renew(b.ctx, *res, &certificate.RenewOptions{Bundle: true, KeyType: certcrypto.EC256, UseARICertID: true}); err != nil {
		t.Fatalf("lego Renew: %v", err)
	}
	return b.pebble.newOrderReplaces()[before:]
}

// A relayed certificate is renewed when the upstream CA says: the
// proxy's renewalInfo is Pebble's window for it (kept for Pebble's
// Retry-After), and a renewal naming it in "replaces" places an upstream
// order replacing it.
func TestARelayedCertificateIsRenewedInTheUpstreamsWindowAndItsRenewalReplacesItUpstream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := newRelayARIBench(t, ctx, true)
	first, leaf := b.obtain(t, "ari.example.com")
	// A window no computation of the proxy's would give.
	start := time.Now().Add(30 * time.Hour).UTC().Truncate(time.Second)
	end := start.Add(90 * time.Minute)
	const why = "https://pebble.example/incident"
	b.pebble.setWindow(t, leaf, start, end, why)

	info, err := b.lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo: %v", err)
	}
	if !info.SuggestedWindow.Start.Equal(start) || !info.SuggestedWindow.End.Equal(end) || info.ExplanationURL != why {
		t.Errorf("window %v – %v (%q); want Pebble's %v – %v (%q)",
			info.SuggestedWindow.Start, info.SuggestedWindow.End, info.ExplanationURL, start, end, why)
	}
	// Pebble asks to be read again in 6h; the proxy's answer holds what
	// is left of that.
	if info.RetryAfter > 6*time.Hour || info.RetryAfter < 6*time.Hour-time.Minute {
		t.Errorf("Retry-After %v; want what is left of Pebble's 6h", info.RetryAfter)
	}

	// Kept for Pebble's Retry-After: a window Pebble moves meanwhile is
	// not asked for again.
	b.pebble.setWindow(t, leaf, start.Add(time.Hour), end.Add(time.Hour), "")
	again, err := b.lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo, again: %v", err)
	}
	if !again.SuggestedWindow.Start.Equal(start) || !again.SuggestedWindow.End.Equal(end) {
		t.Errorf("a second read within Retry-After gave %v – %v; want the kept %v – %v",
			again.SuggestedWindow.Start, again.SuggestedWindow.End, start, end)
	}

	certID, err := api.MakeARICertID(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.renew(t, first); !slices.Equal(got, []string{certID}) {
		t.Errorf("the renewal's upstream newOrders replace %q; want [%s]", got, certID)
	}
}

// A relay pointed at another upstream CA (its directory changed) renews a
// certificate the earlier CA issued: the new one does not know the
// certificate "replaces" names and refuses it, and the relay orders again
// without it, so the client's renewal succeeds all the same.
func TestARelayedCertificateOfAnEarlierUpstreamIsRenewedWithoutReplacesAtTheNewOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := newRelayARIBench(t, ctx, true)
	first, leaf := b.obtain(t, "moved.example.com")
	if err := b.proc.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	earlier := b.pebble
	b.pebble = startRelayPebble(t, b.dns.Addr, 1, false)
	b.start()

	certID, err := api.MakeARICertID(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.renew(t, first); !slices.Equal(got, []string{certID, ""}) {
		t.Errorf("the renewal's newOrders at the new upstream replace %q; want [%s, \"\"]: the certificate, refused, then none", got, certID)
	}
	if n := len(earlier.newOrderReplaces()); n != 1 {
		t.Errorf("the earlier upstream saw %d newOrders; want 1, the first certificate's", n)
	}
}

// Against an upstream without renewal information the proxy computes a
// relayed certificate's window itself, and its renewal is ordered
// upstream without "replaces", which such an upstream does not know.
func TestARelayedCertificateOfAnUpstreamWithoutRenewalInfoGetsTheComputedWindowAndNoReplacesUpstream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := newRelayARIBench(t, ctx, false)
	first, leaf := b.obtain(t, "noari.example.com")
	info, err := b.lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo: %v", err)
	}
	want := authority.ComputedWindow(leaf.NotBefore, leaf.NotAfter, authority.DefaultRenewalPoint)
	if !info.SuggestedWindow.Start.Equal(want.Start) || !info.SuggestedWindow.End.Equal(want.End) {
		t.Errorf("window %v – %v; want the computed %v – %v", info.SuggestedWindow.Start, info.SuggestedWindow.End, want.Start, want.End)
	}
	if got := b.renew(t, first); !slices.Equal(got, []string{""}) {
		t.Errorf("the renewal's upstream newOrders replace %q; want one without replaces", got)
	}
}
