package caddyfile

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

func TestBadChallengesDirectivesFailWithAnErrorNamingTheDirective(t *testing.T) {
	tests := []struct {
		name, caddyfile, want string
	}{
		{"an argument", "http:// {\n\tacme_proxy_challenges extra\n}\n", `acme_proxy_challenges: unexpected argument "extra"`},
		{"a block", "http:// {\n\tacme_proxy_challenges {\n\t\tttl 1h\n\t}\n}\n", "acme_proxy_challenges: unexpected block"},
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

// TestTheREADMEsFleetCaddyfileAdaptsWithTheChallengesAheadOfTheRedirect
// adapts the README's Caddyfiles that mount acme_proxy_challenges: an
// upstream's http-01 request must reach the handler before the redirect.
func TestTheREADMEsFleetCaddyfileAdaptsWithTheChallengesAheadOfTheRedirect(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, b := range regexp.MustCompile("(?s)```caddyfile\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if !strings.Contains(b[1], "acme_proxy_challenges") {
			continue
		}
		seen++
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(b[1]), nil)
		if err != nil {
			t.Errorf("the README's Caddyfile does not adapt: %v\n%s", err, b[1])
			continue
		}
		js := string(out)
		ch, redir := strings.Index(js, `"handler":"acme_proxy_challenges"`), strings.Index(js, `"Location":["https://`)
		if ch < 0 || (strings.Contains(b[1], "redir") && (redir < 0 || redir < ch)) {
			t.Errorf("acme_proxy_challenges at %d, the redirect at %d; want the handler first:\n%s", ch, redir, js)
		}
	}
	if seen == 0 {
		t.Error("the README shows no Caddyfile with acme_proxy_challenges")
	}
}
