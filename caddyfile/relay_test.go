package caddyfile_test

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// stubDNS stands in for a dns.providers.* plugin: adapting only needs the
// module to be registered and to read its Caddyfile block.
type stubDNS struct {
	Server string `json:"server,omitempty"`
}

func (stubDNS) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "dns.providers.acmeproxytest", New: func() caddy.Module { return new(stubDNS) }}
}

func (s *stubDNS) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the provider name
	if d.NextArg() {
		s.Server = d.Val()
	}
	for d.NextBlock(0) {
		if d.Val() != "server" || !d.NextArg() {
			return d.Errf("stub: unexpected %q", d.Val())
		}
		s.Server = d.Val()
	}
	return nil
}

func init() { caddy.RegisterModule(stubDNS{}) }

func TestBadRelaySignerSettingsFailWithAnErrorNamingTheKey(t *testing.T) {
	site := func(block string) string {
		return "https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tsigner relay {\n" + block + "\n\t\t}\n\t}\n}\n"
	}
	const dir = "directory https://ca.example/dir\n"
	tests := []struct {
		name, caddyfile, want string
	}{
		{"missing directory", site("email a@example.com"), "acme_proxy: signer.directory: required by signer relay"},
		{"directory with two values", site("directory a b"), "acme_proxy: signer.directory: want one value, got 2"},
		{"unknown challenge", site(dir + "challenge tls-alpn01"), `acme_proxy: signer.challenge: "tls-alpn01" must be dns01, http01 or bypass`},
		{"eab with one value", site(dir + "eab kid"), "acme_proxy: signer.eab: want a key id and an hmac key, got 1 values"},
		{"dns without provider", site(dir + "dns"), "acme_proxy: signer.dns: want a DNS provider name"},
		{"unknown dns provider", site(dir + "dns nosuchprovider"), "acme_proxy: signer.dns: "},
		{"bad propagation timeout", site(dir + "propagation_timeout soon"), `acme_proxy: signer.propagation_timeout: "soon" is not a duration`},
		{"negative propagation delay", site(dir + "propagation_delay -5s"), `acme_proxy: signer.propagation_delay: "-5s" must not be negative`},
		{"resolvers without values", site(dir + "resolvers"), "acme_proxy: signer.resolvers: want at least one value"},
		{"unknown setting", site(dir + "ca local"), `acme_proxy: signer relay: unknown setting "ca"`},
		{"prepare_upstream neither on nor off", site(dir + "prepare_upstream true"), `acme_proxy: signer.prepare_upstream: "true" must be on or off`},
		{"prepare_upstream without a value", site(dir + "prepare_upstream"), "acme_proxy: signer.prepare_upstream: want one value, got 0"},
		{"directory given twice", site(dir + "directory https://other.example/dir"), "acme_proxy: signer.directory: given twice"},
		{"challenge given twice", site(dir + "challenge dns01\nchallenge http01"), "acme_proxy: signer.challenge: given twice"},
		{"email given twice", site(dir + "email a@example.com\nemail b@example.com"), "acme_proxy: signer.email: given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tt.caddyfile), nil)
			if err == nil {
				t.Fatalf("adapted without error; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

func TestARelayMayWaitNoTimeForDNSPropagation(t *testing.T) {
	const cfg = "https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tsigner relay {\n" +
		"directory https://ca.example/dir\ndns acmeproxytest\npropagation_delay 0s\n\t\t}\n\t}\n}\n"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatalf("propagation_delay 0s: %v", err)
	}
	if strings.Contains(string(out), "propagation_delay") {
		t.Errorf("propagation_delay 0s adapted to a delay: %s", out)
	}
}
