package caddyacmeproxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/acmeproxy/caddy-acme-proxy/internal/freeport"
)

// These tests run a real Caddy through caddy.Load, which is process-global
// state: they must not use t.Parallel, and each stops Caddy when it ends.

// loadCaddyfile is the full Caddyfile of the adapt fixtures, bound to
// 127.0.0.1 on free ports with storage and database in a temporary
// directory, plus a plain HTTP site with a second profile in front of a
// respond.
const loadCaddyfile = `{
	admin off
	persist_config off
	storage file_system %[1]s
	skip_install_trust
	local_certs
	default_bind 127.0.0.1
	http_port %[3]d
	https_port %[4]d
	acme_proxy {
		database %[2]s
	}
}

https://127.0.0.1:%[4]d {
	acme_proxy {
		profile internal
		prefix /acme/in
		signer local_ca {
			ca local
			lifetime 7d
		}
		challenges http-01 dns-01
		challenges tls-alpn-01
		resolvers 10.0.0.53 10.0.1.53:5353
		validation_ports {
			http 8080
			tls 8443
		}
		allow {
			domains *.internal.example.com
			domains .corp.example.com
			ip_ranges 10.0.0.0/8
		}
		deny {
			domains secret.internal.example.com
			ip_ranges 10.66.0.0/16
		}
	}
}

http://127.0.0.1:%[3]d {
	respond "not an ACME endpoint" 404
	acme_proxy {
		profile plain
	}
}
`

func TestAdaptedFullConfigLoadsAndServesTheDirectory(t *testing.T) {
	dir := isolate(t)
	httpPort, httpsPort := freePort(t), freePort(t)
	cfgFile := fmt.Sprintf(loadCaddyfile, filepath.Join(dir, "storage"), filepath.Join(dir, "acme_proxy.db"), httpPort, httpsPort)
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgFile), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	for _, w := range warnings {
		t.Errorf("adapt warning: line %d: %s", w.Line, w.Message)
	}
	load(t, cfgJSON)

	root, err := os.ReadFile(filepath.Join(dir, "storage", "pki", "authorities", "local", "root.crt"))
	if err != nil {
		t.Fatalf("the pki app wrote no root: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		t.Fatal("root.crt holds no certificate")
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	t.Cleanup(client.CloseIdleConnections)

	for _, url := range []string{
		fmt.Sprintf("https://127.0.0.1:%d/acme/in/directory", httpsPort),
		fmt.Sprintf("http://127.0.0.1:%d/acme/plain/directory", httpPort),
	} {
		status, body := getEventually(t, client, url)
		if status != http.StatusOK {
			t.Fatalf("GET %s: status %d, body %s", url, status, body)
		}
		var dir map[string]any
		if err := json.Unmarshal([]byte(body), &dir); err != nil {
			t.Fatalf("GET %s: not JSON: %v\n%s", url, err, body)
		}
		if nonce, _ := dir["newNonce"].(string); !strings.HasSuffix(nonce, "/new-nonce") {
			t.Errorf("GET %s: newNonce = %q, want a new-nonce URL", url, dir["newNonce"])
		}
	}

	// Paths outside the profile's prefix reach the next handler.
	url := fmt.Sprintf("http://127.0.0.1:%d/elsewhere", httpPort)
	if status, body := getEventually(t, client, url); status != http.StatusNotFound || body != "not an ACME endpoint" {
		t.Errorf("GET %s: status %d, body %q; want the respond directive's 404", url, status, body)
	}
}

func TestLoadingABadJSONConfigFailsWithAnErrorNamingTheKey(t *testing.T) {
	tests := []struct {
		name     string
		handlers []map[string]any
		app      map[string]any // more of the acme_proxy app's JSON
		want     string
	}{
		{
			name:     "audit retention that is not a duration",
			handlers: []map[string]any{{"profile": "a"}},
			app:      map[string]any{"audit_retention": "soon"},
			want:     `audit_retention: "soon" is not a duration or "keep"`,
		},
		{
			name:     "negative audit retention",
			handlers: []map[string]any{{"profile": "a"}},
			app:      map[string]any{"audit_retention": "-1h"},
			want:     `audit_retention: "-1h" must be positive`,
		},
		{
			name:     "order retention that is not a duration",
			handlers: []map[string]any{{"profile": "a"}},
			app:      map[string]any{"order_retention": "later"},
			want:     `order_retention: "later" is not a duration or "keep"`,
		},
		{
			name:     "negative certificate retention",
			handlers: []map[string]any{{"profile": "a"}},
			app:      map[string]any{"certificate_retention": "-90d"},
			want:     `certificate_retention: "-90d" must be positive`,
		},
		{
			name:     "unknown challenge type",
			handlers: []map[string]any{{"profile": "a", "challenges": []string{"http-02"}}},
			want:     `challenges: unknown challenge type "http-02"`,
		},
		{
			name:     "profile name with a space",
			handlers: []map[string]any{{"profile": "Bad Name"}},
			want:     `profile: "Bad Name" must match [a-z0-9-]+`,
		},
		{
			name:     "profile name longer than a DNS label",
			handlers: []map[string]any{{"profile": strings.Repeat("a", 64)}},
			want:     `profile: a name of 64 characters; at most 63`,
		},
		{
			name:     "two handlers with one profile",
			handlers: []map[string]any{{"profile": "a"}, {"profile": "a", "prefix": "/other"}},
			want:     `profile: "a" is declared by two acme_proxy handlers`,
		},
		{
			name:     "validation port out of range",
			handlers: []map[string]any{{"profile": "a", "validation_ports": map[string]int{"http": 70000}}},
			want:     "validation_ports.http: port 70000 out of range",
		},
		{
			name:     "signer cert without key",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]string{"module": "local_ca", "cert": "/nonexistent.pem"}}},
			want:     "signer.key: required when signer.cert is set",
		},
		{
			name:     "crl_url over https",
			handlers: []map[string]any{{"profile": "a", "crl_url": "https://ca.example.com/acme/a/crl"}},
			want:     `crl_url: "https://ca.example.com/acme/a/crl" must be an absolute http:// URL`,
		},
		{
			name:     "long-lived leaves without crl_url",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "30d"}}},
			want:     "crl_url: required when signer.lifetime (720h0m0s) exceeds 168h0m0s",
		},
		{
			name: "certificate profile lifetime above the local CA's",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "2d"},
				"certificate_profiles": map[string]any{"short": map[string]any{"lifetime": "1d"}, "long": map[string]any{"lifetime": "3d"}}}},
			want: "certificate_profiles.long.lifetime: 72h0m0s exceeds the local CA's signer.lifetime (48h0m0s)",
		},
		{
			name:     "certificate profile with an unknown ext_key_usage",
			handlers: []map[string]any{{"profile": "a", "certificate_profiles": map[string]any{"c": map[string]any{"ext_key_usage": []string{"email"}}}}},
			want:     `certificate_profiles.c.ext_key_usage: unknown extended key usage "email"`,
		},
		{
			name:     "certificate profile with a bad key type",
			handlers: []map[string]any{{"profile": "a", "certificate_profiles": map[string]any{"c": map[string]any{"key_types": []string{"rsa1024"}}}}},
			want:     `certificate_profiles.c.key_types: unknown key type "rsa1024"`,
		},
		{
			name: "default certificate profile naming an unknown one",
			handlers: []map[string]any{{"profile": "a", "certificate_profiles": map[string]any{"c": map[string]any{}},
				"default_certificate_profile": "d"}},
			want: `default_certificate_profile: "d" is not a configured certificate profile`,
		},
		{
			name:     "web page user that is a fixed name, which every request would be",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "Remote-User"}},
			want:     `acme_proxy_ui: user: "Remote-User" is not one placeholder such as {http.auth.user.id}`,
		},
		{
			name:     "web page user from a request header, which a client forges without forward_auth",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "{http.request.header.Remote-User}"}},
			want:     `acme_proxy_ui: user: {http.request.header.Remote-User} is what the client sent`,
		},
		{
			name:     "web page user from a cookie",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "{http.request.cookie.user}"}},
			want:     `is what the client sent`,
		},
		{
			name:     "unknown signer module",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]string{"module": "vault"}}},
			want:     "signer: loading module 'vault'",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := isolate(t)
			for _, h := range tt.handlers {
				if h["handler"] == nil {
					h["handler"] = "acme_proxy"
				}
			}
			app := map[string]any{"database": filepath.Join(dir, "acme_proxy.db")}
			for k, v := range tt.app {
				app[k] = v
			}
			cfg := map[string]any{
				"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
				"storage": map[string]any{"module": "file_system", "root": filepath.Join(dir, "storage")},
				"apps": map[string]any{
					"acme_proxy": app,
					"pki":        map[string]any{"certificate_authorities": map[string]any{"local": map[string]any{"install_trust": false}}},
					"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
						"listen":          []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))},
						"automatic_https": map[string]any{"disable": true},
						"routes":          []any{map[string]any{"handle": tt.handlers}},
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

// isolate returns a temporary directory and points Caddy's data and config
// directories into it, where Caddy keeps files such as instance.uuid that
// the config's storage does not cover.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	return dir
}

// load runs cfgJSON in this process's Caddy until the test ends.
func load(t *testing.T, cfgJSON []byte) {
	t.Helper()
	if err := caddy.Load(cfgJSON, true); err != nil {
		t.Fatalf("caddy.Load: %v", err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("caddy.Stop: %v", err)
		}
	})
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// below the ephemeral range (see internal/freeport).
func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// getEventually GETs url, retrying connection and TLS errors for a few
// seconds: Caddy obtains the site's certificate in the background.
func getEventually(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			return resp.StatusCode, string(body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
