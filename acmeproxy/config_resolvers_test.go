package acmeproxy

import (
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
)

// A profile's resolvers are checked once, by one rule: what the config's
// Validate accepts, the validator built from it at start accepts too, so a
// config never passes validation only to fail when Caddy starts it.
func TestAResolverTheConfigAcceptsIsOneTheValidatorStartsWith(t *testing.T) {
	tests := []struct {
		name     string
		resolver string
		ok       bool
	}{
		{"ok/IPv4 address", "10.0.0.53", true},
		{"ok/IPv6 address and port", "[2001:db8::53]:53", true},
		{"ok/IPv4 address and port", "10.0.1.53:5353", true},
		{"fail/host name", "ns.example.com", false},
		{"fail/host name and port", "ns.example.com:53", false},
		{"fail/port without host", ":53", false},
		{"fail/port above 65535", "a:99999", false},
		{"fail/two values in one", "a b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ProfileConfig{Profile: "p", Resolvers: []string{tt.resolver}}
			cfg.SetDefaults()
			err := cfg.Validate()
			_, newErr := validate.New(validate.Config{Resolvers: cfg.Resolvers})
			if (err == nil) != (newErr == nil) {
				t.Fatalf("Validate: %v; validate.New: %v; they must agree", err, newErr)
			}
			if tt.ok {
				if err != nil {
					t.Fatalf("Validate refused %q: %v", tt.resolver, err)
				}
				return
			}
			want := `resolvers: "` + tt.resolver + `": `
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Validate: %v; want an error starting %q", err, want)
			}
		})
	}
}
