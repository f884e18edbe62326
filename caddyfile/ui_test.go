package caddyfile

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	// basic_auth, for the fixture that puts it in front of acme_proxy_ui.
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"
)

func TestBadUIDirectivesFailWithAnErrorNamingTheKey(t *testing.T) {
	site := func(block string) string {
		return "https://ops.example.test {\n\tacme_proxy_ui {\n" + block + "\n\t}\n}\n"
	}
	tests := []struct {
		name, caddyfile, want string
	}{
		{"unknown subdirective", site("theme dark"), `acme_proxy_ui: unknown subdirective "theme"`},
		{"prefix without value", site("prefix"), "acme_proxy_ui: prefix: want one value, got 0"},
		{"user with two values", site("user a b"), "acme_proxy_ui: user: want one value, got 2"},
		{"insecure_no_auth with a value", site("insecure_no_auth yes"), "acme_proxy_ui: insecure_no_auth: takes no value"},
		{"argument on the directive", "https://ops.example.test {\n\tacme_proxy_ui /ops extra {\n\t}\n}\n", `acme_proxy_ui: unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tt.caddyfile), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
