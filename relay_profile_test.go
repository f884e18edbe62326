package caddyacmeproxy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/letsencrypt/pebble/v2/ca"
	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Pebble's profiles in these tests: its "shortlived" leaves live 160
// hours, its "default" ones 90 days.
const pebbleShortLived = 160 * time.Hour

func TestARelayedCertificateProfileAsksTheUpstreamForItsMappedProfile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b := newRelayBenchWithPebbleProfiles(t, map[string]ca.Profile{
		"default":    {Description: "90 days", ValidityPeriod: uint64((90 * 24 * time.Hour).Seconds())},
		"shortlived": {Description: "160 hours", ValidityPeriod: uint64(pebbleShortLived.Seconds())},
	})
	b.configure = func(cfg *acmeproxy.ProfileConfig) {
		cfg.CertificateProfiles = map[string]*acmeproxy.CertificateProfileConfig{
			"short": {Description: "a week, from the upstream's shortlived", UpstreamProfile: "shortlived"},
			"bogus": {Description: "maps to a profile the upstream lacks", UpstreamProfile: "nosuch"},
		}
	}
	p := b.start()
	c := p.client(t, ctx)

	t.Run("a mapped profile is asked for upstream and shapes the leaf", func(t *testing.T) {
		before := len(b.pebble.newOrderProfiles())
		o := b.readyProfileOrder(t, ctx, c, "short", "short.example.com")
		ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, "short.example.com"), true)
		if err != nil {
			t.Fatalf("finalize: %v", err)
		}
		if got := b.pebble.newOrderProfiles()[before:]; !slices.Equal(got, []string{"shortlived"}) {
			t.Errorf("the upstream newOrders asked for profiles %q; want [shortlived]", got)
		}
		leaf, err := x509.ParseCertificate(ders[0])
		if err != nil {
			t.Fatal(err)
		}
		if life := leaf.NotAfter.Sub(leaf.NotBefore) + time.Second; life != pebbleShortLived {
			t.Errorf("the leaf lives %s; want Pebble's shortlived %s", life, pebbleShortLived)
		}
		ro, err := p.db.GetRelayOrder(ctx, path.Base(o.URI))
		if err != nil {
			t.Fatal(err)
		}
		if up := b.pebble.store.GetOrderByID(path.Base(ro.UpstreamOrderURL)); up == nil || up.Profile != "shortlived" {
			t.Errorf("Pebble's order %s: %+v; want its profile shortlived", ro.UpstreamOrderURL, up)
		}
	})

	t.Run("a profile the upstream does not offer fails the relay naming the setting", func(t *testing.T) {
		before := b.pebble.count(pebbleNewOrder)
		o := b.readyProfileOrder(t, ctx, c, "bogus", "bogus.example.com")
		if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, "bogus.example.com"), true); err == nil {
			t.Fatal("finalize succeeded with an upstream profile the upstream does not offer")
		}
		id := path.Base(o.URI)
		ro, err := p.db.GetRelayOrder(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"certificate_profiles.bogus.upstream_profile", `"nosuch"`, "default, shortlived"} {
			if !strings.Contains(ro.FailureDetail, want) {
				t.Errorf("operator detail %q does not say %s", ro.FailureDetail, want)
			}
		}
		// The order fails as the job is retired; the job's row follows.
		relayWaitFor(t, 5*time.Second, "the relay job to retire", func() bool {
			j, _ := relayJob(t, p.queue, id)
			return j.Status != store.JobRunning
		})
		if j, _ := relayJob(t, p.queue, id); j.Status != store.JobFailed || j.Attempts != 1 {
			t.Errorf("relay job is %s after %d attempts; want failed after 1 (no retry mends a config mistake)", j.Status, j.Attempts)
		}
		if n := b.pebble.count(pebbleNewOrder); n != before {
			t.Errorf("Pebble got %d new orders for it; want none", n-before)
		}
	})
}

// readyProfileOrder is readyOrder for an order choosing a certificate
// profile.
func (b *relayBench) readyProfileOrder(t *testing.T, ctx context.Context, c *acme.Client, profile string, names ...string) *acme.Order {
	t.Helper()
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs(names...), acme.WithOrderIssuanceProfile(acme.ProfileName(profile)))
	if err != nil {
		t.Fatalf("new order: %v", err)
	}
	return b.proveOrder(t, ctx, c, o)
}

func TestAnUpstreamProfileWithoutARelaySignerIsAConfigErrorNamingTheKey(t *testing.T) {
	dir := isolate(t)
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(dir, "storage")},
		"apps": map[string]any{
			"acme_proxy": map[string]any{"database": filepath.Join(dir, "acme_proxy.db")},
			"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))},
				"automatic_https": map[string]any{"disable": true},
				"routes": []any{map[string]any{"handle": []any{map[string]any{
					"handler": "acme_proxy", "profile": "local",
					"signer":               map[string]any{"module": "local_ca", "lifetime": "24h"},
					"certificate_profiles": map[string]any{"short": map[string]any{"upstream_profile": "shortlived"}},
				}}}},
			}}},
		},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
	err = caddy.Load(cfgJSON, true)
	if want := "certificate_profiles.short.upstream_profile: only a relay signer"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("load: %v; want an error containing %q", err, want)
	}
}
