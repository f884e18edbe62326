package caddyacmeproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/certmagic"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// relayCaddyfile serves three relay profiles over HTTPS (Caddy's internal
// CA, for 127.0.0.1 only) and a plain-HTTP site on the port Pebble sends
// its http-01 requests to. No route of that site answers them: every
// Caddy HTTP server hands /.well-known/acme-challenge/ requests to the TLS
// app first, which finds them in storage under the issuer keys of its
// automation policy for the name — for these names, Caddy's default
// policy. Clients prove names to the proxy by dns-01 against the test DNS
// server.
const relayCaddyfile = `{
	admin off
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	auto_https disable_redirects
	default_bind 127.0.0.1
	http_port %[2]d
	https_port %[10]d
	acme_proxy {
		database %[3]s
	}
}

http://127.0.0.1:%[2]d {
	respond "nothing here" 404
}

https://127.0.0.1:%[10]d {
	tls internal
	acme_proxy {
		profile bypass
		challenges dns-01
		resolvers %[4]s
		signer relay {
			directory %[5]s
			email relay@example.com
			trusted_roots %[6]s
			challenge bypass
		}
	}
	acme_proxy {
		profile dns
		challenges dns-01
		resolvers %[4]s
		signer relay {
			directory %[7]s
			trusted_roots %[8]s
			challenge dns01
			dns acmeproxytest %[9]s
			propagation_timeout -1
			resolvers %[4]s
		}
	}
	acme_proxy {
		profile web
		challenges dns-01
		resolvers %[4]s
		signer relay {
			directory %[7]s
			trusted_roots %[8]s
			challenge http01
		}
	}
}
`

func TestRelayThroughCaddyObtainsFromPebbleWithEachChallengeStrategy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := isolate(t)
	d := startRelayDNS(t)
	relayDNSServers.Store(t.Name(), d)
	t.Cleanup(func() { relayDNSServers.Delete(t.Name()) })
	httpPort, httpsPort := freePort(t), freePort(t)
	// Pebble sends its http-01 requests to httpPort, where Caddy listens.
	// The trusting one offers an alternate chain to a root of its own,
	// as a CA with a cross-signed intermediate does.
	trusting := startRelayPebbleWithAlternates(t, d.Addr, httpPort, true, 1)
	strict := startRelayPebble(t, d.Addr, httpPort, false)

	storage := filepath.Join(dir, "storage")
	cfgFile := fmt.Sprintf(relayCaddyfile, storage, httpPort, filepath.Join(dir, "acme_proxy.db"), d.Addr,
		trusting.dir, trusting.rootsFile, strict.dir, strict.rootsFile, t.Name(), httpsPort)
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgFile), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("adapt warning: line %d: %s", w.Line, w.Message)
	}
	load(t, cfgJSON)
	base := fmt.Sprintf("https://127.0.0.1:%d/acme/", httpsPort)
	client := relayCaddyClient(t, storage)
	if status, body := getEventually(t, client, base+"dns/directory"); status != http.StatusOK {
		t.Fatalf("directory: %d %s", status, body)
	}

	obtain := func(t *testing.T, profile string, req certificate.ObtainRequest) (*certificate.Resource, error) {
		t.Helper()
		c := newRelayLego(t, ctx, base+profile+"/directory", client, d)
		req.KeyType, req.Bundle = certcrypto.EC256, true
		start := time.Now()
		res, err := c.Certificate.Obtain(ctx, req)
		t.Logf("%s: obtain %v took %s", profile, req.Domains, time.Since(start).Round(time.Millisecond))
		return res, err
	}

	t.Run("bypass", func(t *testing.T) {
		res, err := obtain(t, "bypass", certificate.ObtainRequest{Domains: []string{"bypass.example.com"}})
		if err != nil {
			t.Fatalf("obtain: %v", err)
		}
		trusting.checkChainEndsAtRoot(t, res.Certificate, "bypass.example.com")
	})

	// The app's runner takes up the signer_revoke job at once: a client
	// revoking is answered once the upstream revoked, not asked to retry.
	t.Run("a revocation is answered once the upstream revoked it", func(t *testing.T) {
		c := newRelayLego(t, ctx, base+"bypass/directory", client, d)
		res, err := c.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{"revoked.example.com"}, Bundle: true, KeyType: certcrypto.EC256})
		if err != nil {
			t.Fatalf("obtain: %v", err)
		}
		if err := c.Certificate.Revoke(ctx, res.Certificate); err != nil {
			t.Fatalf("lego Revoke: %v; want success", err)
		}
		if trusting.store.GetRevokedCertificateBySerial(relayLeaf(t, res).SerialNumber) == nil {
			t.Error("Pebble does not report the certificate revoked")
		}
	})

	t.Run("a client preferring the upstream's alternate chain gets it", func(t *testing.T) {
		alt := trusting.altRoots[0]
		res, err := obtain(t, "bypass", certificate.ObtainRequest{Domains: []string{"preferred.example.com"}, PreferredChain: alt.Subject.CommonName})
		if err != nil {
			t.Fatalf("obtain: %v", err)
		}
		checkChainEndsAt(t, res.Certificate, "preferred.example.com", alt)
	})

	t.Run("dns01 with a wildcard and a validity window", func(t *testing.T) {
		notAfter := time.Now().Add(72 * time.Hour).Truncate(time.Second).UTC()
		res, err := obtain(t, "dns", certificate.ObtainRequest{
			Domains: []string{"dns.example.com", "*.dns.example.com"}, NotAfter: notAfter,
		})
		if err != nil {
			t.Fatalf("obtain: %v", err)
		}
		leaf := strict.checkChainEndsAtRoot(t, res.Certificate, "host.dns.example.com")
		if !leaf.NotAfter.Equal(notAfter) {
			t.Errorf("leaf notAfter %v; want the %v the client asked for", leaf.NotAfter, notAfter)
		}
		if strings.Join(leaf.DNSNames, ",") != "*.dns.example.com,dns.example.com" &&
			strings.Join(leaf.DNSNames, ",") != "dns.example.com,*.dns.example.com" {
			t.Errorf("leaf names %v", leaf.DNSNames)
		}
	})

	t.Run("http01 answered by Caddy from storage", func(t *testing.T) {
		res, err := obtain(t, "web", certificate.ObtainRequest{Domains: []string{"web.example.com"}})
		if err != nil {
			t.Fatalf("obtain: %v", err)
		}
		strict.checkChainEndsAtRoot(t, res.Certificate, "web.example.com")
		// The published challenges were withdrawn afterwards.
		var left []string
		_ = filepath.WalkDir(filepath.Join(storage, "acme"), func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() && strings.Contains(p, "challenge_tokens") {
				left = append(left, p)
			}
			return nil
		})
		if len(left) > 0 {
			t.Errorf("challenge files left in storage: %v", left)
		}
	})

	t.Run("http01 refuses a wildcard at new-order", func(t *testing.T) {
		before := strict.count(pebbleNewOrder)
		_, err := obtain(t, "web", certificate.ObtainRequest{Domains: []string{"*.web.example.com"}})
		if err == nil {
			t.Fatal("obtained a wildcard through http01")
		}
		if !strings.Contains(err.Error(), "rejectedIdentifier") || !strings.Contains(err.Error(), "http-01") {
			t.Errorf("error %q; want a rejectedIdentifier saying http-01 cannot prove a wildcard", err)
		}
		if n := strict.count(pebbleNewOrder); n != before {
			t.Errorf("the upstream saw %d new orders; want none", n-before)
		}
	})

	t.Run("each profile registers its upstream account once", func(t *testing.T) {
		if n := strict.count(pebbleNewAccount); n != 2 {
			t.Errorf("Pebble saw %d new accounts for the dns and web profiles; want 2", n)
		}
		if n := trusting.count(pebbleNewAccount); n != 1 {
			t.Errorf("Pebble saw %d new accounts for the bypass profile; want 1", n)
		}
		db, err := store.OpenSQLite(ctx, filepath.Join(dir, "acme_proxy.db"), store.SQLiteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for profile, directory := range map[string]string{"bypass": trusting.dir, "dns": strict.dir, "web": strict.dir} {
			a, err := db.GetRelayAccount(ctx, (&certmagic.ACMEIssuer{CA: directory}).IssuerKey(), profile)
			if err != nil || a.Location == "" {
				t.Errorf("the upstream account of %s in the store: %+v, %v; want one, registered", profile, a, err)
			}
		}
	})
}

// relayCaddyClient trusts the root of Caddy's internal CA in storage.
func relayCaddyClient(t *testing.T, storage string) *http.Client {
	t.Helper()
	var root []byte
	relayWaitFor(t, 10*time.Second, "Caddy's local root", func() bool {
		var err error
		root, err = os.ReadFile(filepath.Join(storage, "pki", "authorities", "local", "root.crt"))
		return err == nil
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		t.Fatal("root.crt holds no certificate")
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestLoadingABadRelayConfigFailsWithAnErrorNamingTheKey(t *testing.T) {
	const dir = "https://ca.example/dir"
	tests := []struct {
		name   string
		signer map[string]any
		want   string
	}{
		{"no directory", map[string]any{"challenge": "bypass"}, "signer.directory: required"},
		{"unknown challenge", map[string]any{"directory": dir, "challenge": "tls-alpn01"}, `signer.challenge: "tls-alpn01" must be dns01, http01 or bypass`},
		{"dns01 without dns", map[string]any{"directory": dir, "challenge": "dns01"}, "signer.dns: required with challenge dns01"},
		{"dns with http01", map[string]any{"directory": dir, "challenge": "http01", "dns": map[string]any{"name": "acmeproxytest"}}, "signer.dns: only used with challenge dns01"},
		{"unknown dns provider", map[string]any{"directory": dir, "dns": map[string]any{"name": "nosuchprovider"}}, "signer.dns: loading module"},
		{"missing trusted roots", map[string]any{"directory": dir, "challenge": "bypass", "trusted_roots": "/nonexistent/roots.pem"}, "signer.trusted_roots: open /nonexistent/roots.pem"},
		{"bad eab key", map[string]any{"directory": dir, "challenge": "bypass", "eab": map[string]string{"key_id": "k", "mac_key": "not base64!"}}, "signer.eab: the hmac key must be base64url"},
		{"directory that is not http(s)", map[string]any{"directory": "ftp://x/dir", "challenge": "bypass"}, `signer.directory: "ftp://x/dir" must be an absolute https:// (or http://) URL`},
		{"negative propagation delay", map[string]any{"directory": dir, "propagation_delay": -1}, "signer.propagation_delay: must not be negative"},
		{"propagation timeout with http01", map[string]any{"directory": dir, "challenge": "http01", "propagation_timeout": "2m"}, "signer.propagation_timeout: only used with challenge dns01, not http01"},
		{"propagation delay with bypass", map[string]any{"directory": dir, "challenge": "bypass", "propagation_delay": "5s"}, "signer.propagation_delay: only used with challenge dns01, not bypass"},
		{"resolvers with the default challenge, http01", map[string]any{"directory": dir, "resolvers": []string{"1.1.1.1"}}, "signer.resolvers: only used with challenge dns01, not http01"},
		{"email that is not an e-mail address", map[string]any{"directory": dir, "challenge": "bypass", "email": "pki at example.com"}, `signer.email: "pki at example.com" is not an e-mail address`},
		{"email with a display name", map[string]any{"directory": dir, "challenge": "bypass", "email": "PKI <pki@example.com>"}, `signer.email: "PKI <pki@example.com>" is not an e-mail address`},
		{"email of two addresses", map[string]any{"directory": dir, "challenge": "bypass", "email": "a@example.com,b@example.com"}, `signer.email: "a@example.com,b@example.com" is not an e-mail address`},
		{"dns01 resolver with a port out of range", map[string]any{"directory": dir, "dns": map[string]any{"name": "acmeproxytest"}, "resolvers": []string{"10.0.0.53:99999"}}, "signer.resolvers"},
		{"dns01 resolver with a space", map[string]any{"directory": dir, "dns": map[string]any{"name": "acmeproxytest"}, "resolvers": []string{"10.0.0.53 10.0.0.54"}}, "signer.resolvers"},
		{"prepare_upstream neither on nor off", map[string]any{"directory": dir, "challenge": "bypass", "prepare_upstream": "yes"}, `signer.prepare_upstream: "yes" must be on or off`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := isolate(t)
			tt.signer["module"] = "relay"
			cfg := map[string]any{
				"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
				"storage": map[string]any{"module": "file_system", "root": filepath.Join(dir, "storage")},
				"apps": map[string]any{
					"acme_proxy": map[string]any{"database": filepath.Join(dir, "acme_proxy.db")},
					"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
						"listen":          []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))},
						"automatic_https": map[string]any{"disable": true},
						"routes": []any{map[string]any{"handle": []any{map[string]any{
							"handler": "acme_proxy", "profile": "relayed", "signer": tt.signer,
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
			if err == nil {
				t.Fatalf("loaded; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}
