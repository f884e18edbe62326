package caddyfile

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	// basic_auth, forward_auth and client_auth, which go in front of
	// acme_proxy_ui.
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/caddyauth"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy/forwardauth"
	_ "github.com/caddyserver/caddy/v2/modules/caddytls"
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

// TestTheREADMEsAuthenticationSetupsAdaptWithThePageBehindTheirHandler
// adapts each Caddyfile of the README that mounts acme_proxy_ui, and checks
// that the page comes after the authentication in front of it.
func TestTheREADMEsAuthenticationSetupsAdaptWithThePageBehindTheirHandler(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```caddyfile\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	want := map[string]string{ // the handler (or TLS setting) that authenticates, as it appears in the JSON
		"basic_auth":   `"handler":"authentication"`,
		"forward_auth": `"handler":"reverse_proxy"`,
		"client_auth":  `"mode":"require_and_verify"`,
	}
	seen := map[string]bool{}
	for _, b := range blocks {
		if !strings.Contains(b[1], "acme_proxy_ui") {
			continue
		}
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(b[1]), nil)
		if err != nil {
			t.Errorf("the README's Caddyfile does not adapt: %v\n%s", err, b[1])
			continue
		}
		js := string(out)
		for key, marker := range want {
			if !strings.Contains(b[1], key) {
				continue
			}
			seen[key] = true
			auth, ui := strings.Index(js, marker), strings.Index(js, `"handler":"acme_proxy_ui"`)
			if auth < 0 || ui < 0 || (key != "client_auth" && auth > ui) {
				t.Errorf("%s: the page is not behind the authentication (at %d, page at %d):\n%s", key, auth, ui, js)
			}
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("the README shows no %s setup for acme_proxy_ui", key)
		}
	}
}
