package caddyacmeproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
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
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
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
	expiredCA := writeIssuingCA(t, "expired issuing CA", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	yearCA := writeIssuingCA(t, "issuing CA for a year", time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0))
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
			name:     "a notify script that does not exist",
			handlers: []map[string]any{{"profile": "a"}},
			app:      map[string]any{"notify": []map[string]any{{"type": "script", "command": "/nonexistent/acme-notify"}}},
			want:     "notify script: command: stat /nonexistent/acme-notify: no such file or directory",
		},
		{
			name:     "a profile's notify script that is not executable",
			handlers: []map[string]any{{"profile": "a", "notify": []map[string]any{{"type": "script", "command": expiredCA.cert}}}},
			want:     "notify script: command: " + expiredCA.cert + " is not an executable file",
		},
		{
			name:     "a notify script by a relative path",
			handlers: []map[string]any{{"profile": "a"}},
			app:      map[string]any{"notify": []map[string]any{{"type": "script", "command": "bin/acme-notify"}}},
			want:     `notify script: command: "bin/acme-notify" must be an absolute path`,
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
			name:     "two handlers in one route with one prefix, the second never reached",
			handlers: []map[string]any{{"profile": "a", "prefix": "/acme"}, {"profile": "b", "prefix": "/acme/"}},
			want:     `prefix: profile "b" (prefix /acme) would never be reached: profile "a" (prefix /acme) comes before it and answers every path under /acme`,
		},
		{
			name:     "a handler whose prefix lies under an earlier handler's",
			handlers: []map[string]any{{"profile": "outer", "prefix": "/acme"}, {"profile": "inner", "prefix": "/acme/a"}},
			want:     `prefix: profile "inner" (prefix /acme/a) would never be reached: profile "outer" (prefix /acme) comes before it and answers every path under /acme`,
		},
		{
			name:     "a handler whose default prefix an earlier handler's prefix takes",
			handlers: []map[string]any{{"profile": "a", "prefix": "/acme/b"}, {"profile": "b"}},
			want:     `prefix: profile "b" (prefix /acme/b) would never be reached: profile "a" (prefix /acme/b) comes before it`,
		},
		{
			name:     "a handler in a subroute under an earlier handler's prefix",
			handlers: []map[string]any{{"profile": "outer", "prefix": "/acme"}, {"handler": "subroute", "routes": []any{map[string]any{"handle": []any{map[string]any{"handler": "acme_proxy", "profile": "inner", "prefix": "/acme/in"}}}}}},
			want:     `prefix: profile "inner" (prefix /acme/in) would never be reached: profile "outer" (prefix /acme)`,
		},
		{
			name:     "a handler whose prefix takes a later handler's order endpoints",
			handlers: []map[string]any{{"profile": "inner", "prefix": "/acme/order"}, {"profile": "outer", "prefix": "/acme"}},
			want:     `prefix: profile "inner" (prefix /acme/order) comes before profile "outer" (prefix /acme) and takes its order endpoints`,
		},
		{
			name:     "a prefix with a parent segment",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a/../b"}},
			want:     `prefix: "/a/../b" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with an empty segment",
			handlers: []map[string]any{{"profile": "a", "prefix": "//a"}},
			want:     `prefix: "//a" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with a dot segment",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a/./b"}},
			want:     `prefix: "/a/./b" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with a space",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a b"}},
			want:     `prefix: "/a b" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with a pattern wildcard",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a/{x...}"}},
			want:     `prefix: "/a/{x...}" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with a brace",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a{"}},
			want:     `prefix: "/a{" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with a query",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a?b"}},
			want:     `prefix: "/a?b" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "a prefix with an escape",
			handlers: []map[string]any{{"profile": "a", "prefix": "/a%20b"}},
			want:     `prefix: "/a%20b" must be a path of segments of letters, digits and -._~`,
		},
		{
			name:     "validation port out of range",
			handlers: []map[string]any{{"profile": "a", "validation_ports": map[string]int{"http": 70000}}},
			want:     "validation_ports.http: port 70000 out of range",
		},
		{
			name: "signer cert of an issuing CA that has expired",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]string{"module": "local_ca",
				"cert": expiredCA.cert, "key": expiredCA.key}}},
			want: `signer.cert: the issuing CA "CN=expired issuing CA" expired at`,
		},
		{
			name: "signer ca with cert and key, which would be ignored",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]string{"module": "local_ca", "ca": "local",
				"cert": expiredCA.cert, "key": expiredCA.key}}},
			want: `signer.ca: "local" and signer.cert/signer.key are alternatives`,
		},
		{
			name:     "signer ca with a key alone",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]string{"module": "local_ca", "ca": "local", "key": "/nonexistent.key"}}},
			want:     `signer.ca: "local" and signer.cert/signer.key are alternatives`,
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
			name:     "terms_of_service that is not an absolute URL",
			handlers: []map[string]any{{"profile": "a", "terms_of_service": "/terms.html"}},
			want:     `terms_of_service: "/terms.html" must be an absolute http:// or https:// URL`,
		},
		{
			name:     "website that is not a web URL",
			handlers: []map[string]any{{"profile": "a", "website": "mailto:pki@example.com"}},
			want:     `website: "mailto:pki@example.com" must be an absolute http:// or https:// URL`,
		},
		{
			name: "crl_url with a relay signer, whose leaves the upstream CA's CRL covers",
			handlers: []map[string]any{{"profile": "a", "crl_url": "http://ca.example.com/acme/a/crl",
				"signer": map[string]any{"module": "relay", "directory": "https://ca.example/dir", "challenge": "bypass"}}},
			want: "crl_url: only a signer whose CRL this server publishes (local_ca) puts it in its leaves; this profile's signer is relay",
		},
		{
			name: "crl_url with a script signer, whose leaves its own CA signs",
			handlers: []map[string]any{{"profile": "a", "crl_url": "http://ca.example.com/acme/a/crl",
				"signer": map[string]any{"module": "script", "command": []string{"/bin/true"}}}},
			want: "crl_url: only a signer whose CRL this server publishes (local_ca) puts it in its leaves; this profile's signer is script",
		},
		{
			name: "long-lived leaves without crl_url",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "30d",
				"cert": yearCA.cert, "key": yearCA.key}}},
			want: "crl_url: required when signer.lifetime (720h0m0s) exceeds 168h0m0s",
		},
		{
			name: "certificate profile lifetime above the local CA's",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "2d"},
				"certificate_profiles": map[string]any{"short": map[string]any{"lifetime": "1d"}, "long": map[string]any{"lifetime": "3d"}}}},
			want: "certificate_profiles.long.lifetime: 72h0m0s exceeds the local CA's signer.lifetime (48h0m0s)",
		},
		{
			name:     "certificate profile lifetime that is not a duration",
			handlers: []map[string]any{{"profile": "a", "certificate_profiles": map[string]any{"c": map[string]any{"lifetime": "1 hour"}}}},
			want:     `json: cannot unmarshal "1 hour", which is not a duration (such as 90d, 12h), into Go struct field CertificateProfileConfig.ProfileConfig.certificate_profiles.lifetime of type acmeproxy.Duration`,
		},
		{
			name:     "renewal_info retry_after that is neither a string nor a number",
			handlers: []map[string]any{{"profile": "a", "renewal_info": map[string]any{"retry_after": true}}},
			want:     `json: cannot unmarshal true, which is not a duration (a string such as "90d" or "12h", or a number of nanoseconds), into Go struct field RenewalInfoConfig.ProfileConfig.renewal_info.retry_after of type acmeproxy.Duration`,
		},
		{
			name:     "limit period that is not a duration",
			handlers: []map[string]any{{"profile": "a", "limits": map[string]any{"orders_per_account": map[string]any{"count": 5, "period": "weekly"}}}},
			want:     `json: cannot unmarshal "weekly", which is not a duration (such as 90d, 12h), into Go struct field LimitConfig.ProfileConfig.limits.orders_per_account.period of type acmeproxy.Duration`,
		},
		{
			name:     "renewal_info retry_after under a minute",
			handlers: []map[string]any{{"profile": "a", "renewal_info": map[string]any{"retry_after": "1ms"}}},
			want:     "renewal_info.retry_after: 1ms is outside 1m0s to 24h0m0s",
		},
		{
			name:     "renewal_info retry_after of a century",
			handlers: []map[string]any{{"profile": "a", "renewal_info": map[string]any{"retry_after": "36500d"}}},
			want:     "renewal_info.retry_after: 876000h0m0s is outside 1m0s to 24h0m0s",
		},
		{
			name:     "local_ca lifetime that is not a duration",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "soon"}}},
			want:     `json: cannot unmarshal "soon", which is not a duration (such as 7d, 12h), into Go struct field LocalCA.Config.lifetime`,
		},
		{
			name:     "local_ca lifetime beyond what a duration holds",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "100000000d"}}},
			want:     `json: cannot unmarshal "100000000d", which is not a duration (such as 7d, 12h), into Go struct field LocalCA.Config.lifetime`,
		},
		{
			name:     "local_ca lifetime no longer than its backdate",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca", "lifetime": "1s"}}},
			want:     "signer.lifetime: 1s must be longer than 1m0s",
		},
		{
			name: "local_ca cert file that does not exist",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca",
				"cert": "/nonexistent/ca.pem", "key": expiredCA.key}}},
			want: "signer.cert: open /nonexistent/ca.pem: no such file or directory",
		},
		{
			name: "local_ca key file without a key",
			handlers: []map[string]any{{"profile": "a", "signer": map[string]any{"module": "local_ca",
				"cert": expiredCA.cert, "key": expiredCA.cert}}},
			want: fmt.Sprintf("signer.key: %q: no PEM private key block", expiredCA.cert),
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
			name:     "certificate profile lifetime no longer than the local CA's backdate",
			handlers: []map[string]any{{"profile": "a", "certificate_profiles": map[string]any{"short": map[string]any{"lifetime": "1m"}}}},
			want:     `certificate_profiles.short.lifetime: 1m0s is too short; more than 1m0s`,
		},
		{
			name:     "web page user that is a fixed name, which every request would be",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "Remote-User"}},
			want:     `acme_proxy_ui: user: "Remote-User" is not one placeholder such as {http.auth.user.id}`,
		},
		{
			name:     "web page user from a request header, which a client forges without forward_auth",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "{http.request.header.Remote-User}"}},
			want:     `acme_proxy_ui: user: {http.request.header.Remote-User} names no one Caddy authenticated`,
		},
		{
			name:     "web page prefix with a parent segment",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "prefix": "/ops/../admin"}},
			want:     `acme_proxy_ui: prefix: "/ops/../admin" must be a path of segments`,
		},
		{
			name:     "web page user from a cookie",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "{http.request.cookie.user}"}},
			want:     `names no one Caddy authenticated`,
		},
		{
			name:     "web page user from the TLS handshake, unverified under client_auth mode request",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "{http.request.tls.client.subject}"}},
			want:     `names no one Caddy authenticated`,
		},
		{
			name:     "web page user from the environment, a fixed name",
			handlers: []map[string]any{{"handler": "acme_proxy_ui", "user": "{env.OPERATOR}"}},
			want:     `names no one Caddy authenticated`,
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
			err := loadHandlers(t, dir, tt.app, tt.handlers)
			if err == nil {
				t.Fatalf("loaded; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

// A placeholder ({env.X}, {file.path}) that is empty when the config
// loads — its variable unset, its file missing — fails the load in every
// key that holds a secret or a value the setting cannot do without,
// naming the key and the placeholder, never a value: else an EAB would
// bind nothing, a webhook go unsigned, a script run without its PIN, and
// each would be found out only at the first issuance or delivery, or not
// at all. (A notify email's username and password may both be empty: no
// authentication; notify.Destination.Validate refuses one alone.)
func TestAPlaceholderThatIsEmptyWhenTheConfigLoadsFailsTheLoadNamingTheKey(t *testing.T) {
	const secret = "s3cret-value-never-shown"
	t.Setenv("ACME_PROXY_TEST_SET_SECRET", secret)
	relay := func(more map[string]any) []map[string]any {
		s := map[string]any{"module": "relay", "directory": "https://ca.example/dir", "challenge": "bypass"}
		for k, v := range more {
			s[k] = v
		}
		return []map[string]any{{"handler": "acme_proxy", "profile": "a", "signer": s}}
	}
	tests := []struct {
		name     string
		handlers []map[string]any
		app      map[string]any // more of the acme_proxy app's JSON
		want     string
	}{
		{
			name:     "a postgres DSN that is empty once its placeholder is replaced",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app:      map[string]any{"database": "", "postgres": "{env.ACME_PROXY_TEST_UNSET_DSN}"},
			want:     "database postgres: the DSN is empty after its placeholders were replaced",
		},
		{
			name:     "a postgres DSN of blanks",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app:      map[string]any{"database": "", "postgres": " {env.ACME_PROXY_TEST_UNSET_DSN} "},
			want:     "database postgres: the DSN is empty after its placeholders were replaced",
		},
		{
			name:     "a webhook secret whose placeholder is empty, which would send every notification unsigned",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app: map[string]any{"notify": []map[string]any{{"type": "webhook", "url": "https://hooks.example.com/acme",
				"secret": "{env.ACME_PROXY_TEST_UNSET_SECRET}"}}},
			want: "notify webhook: secret: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_SECRET} is empty",
		},
		{
			name: "a profile's webhook secret whose placeholder is empty",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "notify": []map[string]any{{"type": "webhook", "url": "https://hooks.example.com/acme",
				"secret": "{env.ACME_PROXY_TEST_UNSET_SECRET}"}}}},
			want: "notify webhook: secret: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_SECRET} is empty",
		},
		{
			name:     "a webhook header whose placeholder is empty, which would send a bearer token of nothing",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app: map[string]any{"notify": []map[string]any{{"type": "webhook", "url": "https://hooks.example.com/acme",
				"headers": map[string]string{"Authorization": "Bearer {env.ACME_PROXY_TEST_UNSET_TOKEN}"}}}},
			want: "notify webhook: header Authorization: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_TOKEN} is empty",
		},
		{
			name: "a SQLite file whose placeholder is empty, which would name a file literally {env.X} in the working directory",
			app:  map[string]any{"database": "{env.ACME_PROXY_TEST_UNSET_DB}"},
			want: "database: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_DB} is empty",
		},
		{
			name:     "a webhook url whose placeholder is empty",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app:      map[string]any{"notify": []map[string]any{{"type": "webhook", "url": "{env.ACME_PROXY_TEST_UNSET_HOOK}"}}},
			want:     "notify webhook: url: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_HOOK} is empty",
		},
		{
			name:     "a postgres DSN whose password placeholder is empty",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app: map[string]any{"database": "",
				"postgres": "postgres://{env.ACME_PROXY_TEST_SET_SECRET}:{env.ACME_PROXY_TEST_UNSET_PGPASSWORD}@127.0.0.1:1/acme"},
			want: "database postgres: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_PGPASSWORD} is empty",
		},
		{
			name:     "a mail server whose placeholder is empty",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app: map[string]any{"notify": []map[string]any{{"type": "email", "smtp": "{env.ACME_PROXY_TEST_UNSET_SMTP}:587",
				"from": "acme@example.com", "to": []string{"ops@example.com"}}}},
			want: "notify email: smtp: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_SMTP} is empty",
		},
		{
			name: "a script signer env value whose placeholder is empty, which would run the program without its PIN",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "signer": map[string]any{"module": "script",
				"command": []string{"/bin/true"}, "env": map[string]string{"CA_DIR": "/srv/ca", "TOKEN": "{env.ACME_PROXY_TEST_SET_SECRET}",
					"PIN": "{env.ACME_PROXY_TEST_UNSET_PIN}"}}}},
			want: "signer.env PIN: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_PIN} is empty",
		},
		{
			name: "a script signer env value read from a file that is missing",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "signer": map[string]any{"module": "script",
				"command": []string{"/bin/true"}, "env": map[string]string{"PIN": "{file./nonexistent/acme-proxy-pin}"}}}},
			want: "signer.env PIN: evaluated placeholder {file./nonexistent/acme-proxy-pin} is empty",
		},
		{
			name:     "a notify script argument whose placeholder is empty, which would run the script with an empty token",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a"}},
			app: map[string]any{"notify": []map[string]any{{"type": "script", "command": "/bin/true",
				"args": []string{"--token={env.ACME_PROXY_TEST_SET_SECRET}", "--key={env.ACME_PROXY_TEST_UNSET_KEY}"}}}},
			want: "notify script: arg 2: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_KEY} is empty",
		},
		{
			name: "a profile's notify script argument whose placeholder is empty",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "notify": []map[string]any{{"type": "script", "command": "/bin/true",
				"args": []string{"{env.ACME_PROXY_TEST_UNSET_KEY}"}}}}},
			want: "notify script: arg 1: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_KEY} is empty",
		},
		{
			name: "a script signer argument whose placeholder is empty, which would run the program without its token",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "signer": map[string]any{"module": "script",
				"command": []string{"/bin/true", "--token", "{env.ACME_PROXY_TEST_SET_SECRET}", "--pin={env.ACME_PROXY_TEST_UNSET_PIN}"}}}},
			want: "signer.command arg 3: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_PIN} is empty",
		},
		{
			name:     "a CAA account URI prefix whose placeholder is empty, against which no accounturi would match",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "caa": map[string]any{"identities": []string{"ca.example.com"}, "account_uri_prefix": "https://ca.example.com/acme/{env.ACME_PROXY_TEST_UNSET_PROFILE}/account/"}}},
			want:     "caa.account_uri_prefix: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_PROFILE} is empty",
		},
		{
			name:     "terms of service whose placeholder is empty",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "terms_of_service": "https://ca.example.com/tos/{env.ACME_PROXY_TEST_UNSET_TOS}"}},
			want:     "terms_of_service: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_TOS} is empty",
		},
		{
			name:     "a relay directory whose placeholder is empty",
			handlers: relay(map[string]any{"directory": "https://ca.example/{env.ACME_PROXY_TEST_UNSET_DIRECTORY}"}),
			want:     "signer.directory: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_DIRECTORY} is empty",
		},
		{
			name:     "a relay email whose placeholder is empty, which would register the upstream account without its contact",
			handlers: relay(map[string]any{"email": "{env.ACME_PROXY_TEST_UNSET_EMAIL}"}),
			want:     "signer.email: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_EMAIL} is empty",
		},
		{
			name: "a relay EAB key id whose placeholder is empty",
			handlers: relay(map[string]any{"eab": map[string]string{"key_id": "kid-{env.ACME_PROXY_TEST_UNSET_KID}",
				"mac_key": "{env.ACME_PROXY_TEST_SET_SECRET}"}}),
			want: "signer.eab: key id: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_KID} is empty",
		},
		{
			name: "a relay EAB HMAC key whose placeholder is empty",
			handlers: relay(map[string]any{"eab": map[string]string{"key_id": "{env.ACME_PROXY_TEST_SET_SECRET}",
				"mac_key": "{env.ACME_PROXY_TEST_UNSET_MAC}"}}),
			want: "signer.eab: hmac key: evaluated placeholder {env.ACME_PROXY_TEST_UNSET_MAC} is empty",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := isolate(t)
			t.Chdir(dir) // a relative path the load would create lands here
			err := loadHandlers(t, dir, tt.app, tt.handlers)
			if err == nil {
				t.Fatalf("loaded; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q\nshows the value of a placeholder", err)
			}
		})
	}
}

// loadHandlers loads, in this process's Caddy until the test ends, the
// acme_proxy app (its database in dir, with more of its JSON in app) and
// one HTTP server whose one route runs handlers; Caddy logs to dir/caddy.log.
func loadHandlers(t *testing.T, dir string, app map[string]any, handlers []map[string]any) error {
	t.Helper()
	return loadHandlersWithPKI(t, dir, app, map[string]any{"certificate_authorities": map[string]any{"local": map[string]any{"install_trust": false}}}, handlers)
}

// loadHandlersWithPKI is loadHandlers with pki as the pki app's JSON.
func loadHandlersWithPKI(t *testing.T, dir string, app, pki map[string]any, handlers []map[string]any) error {
	t.Helper()
	appCfg := map[string]any{"database": filepath.Join(dir, "acme_proxy.db")}
	for k, v := range app {
		appCfg[k] = v
	}
	cfg := map[string]any{
		"admin":   map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"writer": map[string]any{"output": "file", "filename": filepath.Join(dir, "caddy.log")}}}},
		"storage": map[string]any{"module": "file_system", "root": filepath.Join(dir, "storage")},
		"apps": map[string]any{
			"acme_proxy": appCfg,
			"pki":        pki,
			"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
				"listen":          []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))},
				"automatic_https": map[string]any{"disable": true},
				"routes":          []any{map[string]any{"handle": handlers}},
			}}},
		},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
	return caddy.Load(cfgJSON, true)
}

// A pki CA given an intermediate that may not sign CRLs fails the load,
// naming signer.ca: the local CA signs the CRL of its leaves with it, so
// it would issue leaves whose revocation no CRL could list.
func TestAPKICAWhoseIntermediateCannotSignItsLeavesCRLFailsTheLoad(t *testing.T) {
	dir := isolate(t)
	now := time.Now()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	interKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	interDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "intermediate without cRLSign"}, NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(0, 6, 0),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign}, root, interKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"root.crt": rootDER, "inter.crt": interDER}
	for name, key := range map[string]*ecdsa.PrivateKey{"root.key": rootKey, "inter.key": interKey} {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = der
	}
	for name, der := range files {
		typ := "CERTIFICATE"
		if strings.HasSuffix(name, ".key") {
			typ = "PRIVATE KEY"
		}
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pki := map[string]any{"certificate_authorities": map[string]any{"local": map[string]any{"install_trust": false,
		"root":         map[string]string{"certificate": filepath.Join(dir, "root.crt"), "private_key": filepath.Join(dir, "root.key")},
		"intermediate": map[string]string{"certificate": filepath.Join(dir, "inter.crt"), "private_key": filepath.Join(dir, "inter.key")},
	}}}
	err = loadHandlersWithPKI(t, dir, nil, pki, []map[string]any{{"handler": "acme_proxy", "profile": "a"}})
	if err == nil {
		t.Fatal("loaded; want the pki CA refused")
	}
	for _, want := range []string{"signer.ca", "intermediate without cRLSign", "cRLSign"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
}

// Every leaf ends with Caddy's intermediate at the latest, and Caddy
// replaces that intermediate in the last fifth of its lifetime: a leaf
// lifetime longer than the intermediate's could never be issued, so it
// fails the load as Caddy's own acme_server refuses it, rather than every
// leaf being cut short to a fraction of what the config says.
func TestALeafLifetimeLongerThanCaddysIntermediateFailsTheLoad(t *testing.T) {
	tests := []struct {
		name, lifetime, intermediateLifetime string // "" for Caddy's default, 7 days
		want                                 string // "" for a load that succeeds
	}{
		{name: "fail/30-day leaves from the default 7-day intermediate", lifetime: "30d",
			want: `signer.lifetime: 720h0m0s is longer than the intermediate_lifetime (168h0m0s) of Caddy's pki CA "local"`},
		{name: "fail/8-day leaves from the default 7-day intermediate", lifetime: "8d",
			want: `signer.lifetime: 192h0m0s is longer than the intermediate_lifetime (168h0m0s) of Caddy's pki CA "local"`},
		{name: "fail/2-day leaves from a 1-day intermediate", lifetime: "2d", intermediateLifetime: "1d",
			want: `signer.lifetime: 48h0m0s is longer than the intermediate_lifetime (24h0m0s) of Caddy's pki CA "local"`},
		{name: "ok/the default 7-day leaves from the default 7-day intermediate"},
		{name: "ok/30-day leaves from a 60-day intermediate", lifetime: "30d", intermediateLifetime: "60d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := isolate(t)
			ca := map[string]any{"install_trust": false}
			if tc.intermediateLifetime != "" {
				ca["intermediate_lifetime"] = tc.intermediateLifetime
			}
			signerCfg := map[string]any{"module": "local_ca"}
			if tc.lifetime != "" {
				signerCfg["lifetime"] = tc.lifetime
			}
			err := loadHandlersWithPKI(t, dir, nil, map[string]any{"certificate_authorities": map[string]any{"local": ca}},
				[]map[string]any{{"handler": "acme_proxy", "profile": "a", "crl_url": "http://crl.example.test/acme/a/crl", "signer": signerCfg}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("load: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("loaded; want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
}

// An issuing CA from files that expires within a month loads, and says so
// in the log: nothing renews files, and its leaves are cut short to end
// with it.
func TestAnIssuingCAFromFilesThatExpiresSoonIsLoggedAtLoad(t *testing.T) {
	dir := isolate(t)
	soon := writeIssuingCA(t, "expiring issuing CA", time.Now().Add(-time.Hour), time.Now().Add(5*24*time.Hour))
	err := loadHandlers(t, dir, nil, []map[string]any{{"handler": "acme_proxy", "profile": "a",
		"signer": map[string]string{"module": "local_ca", "cert": soon.cert, "key": soon.key, "lifetime": "1d"}}})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"event":"issuing_ca_expiring"`) || !strings.Contains(string(log), "CN=expiring issuing CA") {
		t.Errorf("the log does not warn of the expiring CA:\n%s", log)
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

// issuingCAFiles are the PEM files of an issuing CA, as signer.cert and
// signer.key name them.
type issuingCAFiles struct{ cert, key string }

// writeIssuingCA writes a self-signed issuing CA valid from notBefore to
// notAfter, and its key, into the test's temporary directory.
func writeIssuingCA(t *testing.T, cn string, notBefore, notAfter time.Time) issuingCAFiles {
	t.Helper()
	dir := t.TempDir()
	f := issuingCAFiles{cert: filepath.Join(dir, "ca.pem"), key: filepath.Join(dir, "ca.key")}
	writeIssuingCAFiles(t, f, cn, notBefore, notAfter)
	return f
}

// writeIssuingCAFiles writes a self-signed issuing CA valid from notBefore
// to notAfter into f.cert, and its key (PKCS #8) into f.key.
func writeIssuingCAFiles(t testing.TB, f issuingCAFiles, cn string, notBefore, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		t.Fatal(err)
	}
}
