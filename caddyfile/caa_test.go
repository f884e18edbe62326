package caddyfile_test

import (
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// A bad caa block fails the adapt with an error naming the key, before
// any Caddy starts with it.
func TestABadCAABlockFailsWithAnErrorNamingTheKey(t *testing.T) {
	site := func(block string) string {
		return "https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n" + block + "\n\t}\n}\n"
	}
	tests := []struct {
		name, caddyfile, want string
	}{
		{"fail/empty block", site("caa"), "acme_proxy: caa.identities: at least one issuer domain name is required"},
		{"fail/argument on the line", site("caa ca.example"), `acme_proxy: caa: unexpected argument "ca.example"`},
		{"fail/identities without values", site("caa {\nidentities\n}"), "acme_proxy: caa.identities: want at least one value"},
		{"fail/identity not a domain name", site("caa {\nidentities ca.example ca_2.example\n}"), `acme_proxy: caa.identities: "ca_2.example"`},
		{"fail/account_uri_prefix with two values", site("caa {\nidentities ca.example\naccount_uri_prefix a b\n}"), "acme_proxy: caa.account_uri_prefix: want one value, got 2"},
		{"fail/account_uri_prefix without the trailing slash", site("caa {\nidentities ca.example\naccount_uri_prefix https://ca.example/acme/a/account\n}"),
			`acme_proxy: caa.account_uri_prefix: "https://ca.example/acme/a/account": must end with "/"`},
		{"fail/unknown setting", site("caa {\nidentities ca.example\nissuer ca.example\n}"), `acme_proxy: caa: unknown setting "issuer"`},
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

// The README's CAA example is a block an operator can paste into a site:
// it adapts, and carries its identities and prefix into the handler.
func TestTheREADMEsCAAExampleAdapts(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### CAA\n")
	if !ok {
		t.Fatal("the README has no CAA section")
	}
	_, block, ok := strings.Cut(section, "\n```\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal("the README's CAA section shows no Caddyfile block")
	}
	indented := "\t" + strings.ReplaceAll(block, "\n", "\n\t") // inside the site block, as caddy fmt writes it
	got := adapt(t, "https://ca.internal.example.com {\n"+indented+"\n}\n")
	for _, want := range []string{`"caa": {`, `"ca.internal.example.com"`, `"account_uri_prefix": "https://ca.internal.example.com/acme/internal/account/"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the README's CAA block adapts without %s:\n%s", want, got)
		}
	}
}
