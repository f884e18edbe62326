package caddyfile

import (
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
