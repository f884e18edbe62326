package caddyacmeproxy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// Two acme_proxy handlers whose prefixes nest pass validation when each
// is reachable — another site, a matcher or handle block in front, or
// the longer prefix first — and fail it, naming prefix and both
// profiles, when an earlier one answers every path of a later one.
func TestValidatingACaddyfileRefusesOnlyAnUnreachableProfile(t *testing.T) {
	tests := []struct {
		name  string
		sites string
		want  string // "" when the config is valid
	}{
		{
			name: "ok/one prefix on two sites",
			sites: `http://a.example.com:%[1]d {
	acme_proxy {
		profile a
		prefix /acme
	}
}
http://b.example.com:%[1]d {
	acme_proxy {
		profile b
		prefix /acme
	}
}`,
		},
		{
			name: "ok/the longer prefix first",
			sites: `http://ca.example.com:%[1]d {
	acme_proxy {
		profile inner
		prefix /acme/a
	}
	acme_proxy {
		profile outer
		prefix /acme
	}
}`,
		},
		{
			name: "ok/nested prefixes in handle blocks",
			sites: `http://ca.example.com:%[1]d {
	handle /acme/* {
		acme_proxy {
			profile outer
			prefix /acme
		}
	}
	handle /acme/a/* {
		acme_proxy {
			profile inner
			prefix /acme/a
		}
	}
}`,
		},
		{
			name: "ok/the outer prefix behind a matcher",
			sites: `http://ca.example.com:%[1]d {
	acme_proxy /acme/directory {
		profile outer
		prefix /acme
	}
	acme_proxy {
		profile inner
		prefix /acme/a
	}
}`,
		},
		{
			name: "ok/the longer prefix first, below no endpoint of the shorter",
			sites: `http://ca.example.com:%[1]d {
	acme_proxy {
		profile inner
		prefix /acme/orders
	}
	acme_proxy {
		profile outer
		prefix /acme
	}
}`,
		},
		{
			name: "fail/the longer prefix first, over an endpoint of the shorter",
			sites: `http://ca.example.com:%[1]d {
	acme_proxy {
		profile inner
		prefix /acme/directory
	}
	acme_proxy {
		profile outer
		prefix /acme
	}
}`,
			want: `prefix: profile "inner" (prefix /acme/directory) comes before profile "outer" (prefix /acme) and takes its directory endpoints`,
		},
		{
			name: "fail/the shorter prefix first",
			sites: `http://ca.example.com:%[1]d {
	acme_proxy {
		profile outer
		prefix /acme
	}
	acme_proxy {
		profile inner
		prefix /acme/a
	}
}`,
			want: `prefix: profile "inner" (prefix /acme/a) would never be reached: profile "outer" (prefix /acme) comes before it`,
		},
		{
			name: "fail/one prefix twice on one site",
			sites: `http://ca.example.com:%[1]d {
	acme_proxy {
		profile a
		prefix /acme
	}
	acme_proxy {
		profile b
		prefix /acme
	}
}`,
			want: `prefix: profile "b" (prefix /acme) would never be reached: profile "a" (prefix /acme)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := isolate(t)
			cfgFile := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tstorage file_system %s\n\tskip_install_trust\n\tacme_proxy {\n\t\tdatabase %s\n\t}\n}\n",
				filepath.Join(dir, "storage"), filepath.Join(dir, "acme_proxy.db")) + fmt.Sprintf(tt.sites, freePort(t))
			cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfgFile), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			err = caddyValidate(t, cfgJSON)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("valid; want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

// The same holds across the routes of a server, as a JSON config often
// writes one handler a route: a later route's handler is never reached
// under an earlier route's prefix unless that route has a matcher.
func TestValidatingAJSONConfigRefusesAProfileAnEarlierRouteLeavesUnreachable(t *testing.T) {
	outer := map[string]any{"handler": "acme_proxy", "profile": "outer", "prefix": "/acme"}
	inner := map[string]any{"handler": "acme_proxy", "profile": "inner", "prefix": "/acme/a"}
	tests := []struct {
		name   string
		routes []any
		want   string // "" when the config is valid
	}{
		{
			name:   "ok/the longer prefix in the earlier route",
			routes: []any{map[string]any{"handle": []any{inner}}, map[string]any{"handle": []any{outer}}},
		},
		{
			name: "ok/the earlier route has a host matcher",
			routes: []any{map[string]any{"match": []any{map[string]any{"host": []string{"a.example.com"}}}, "handle": []any{outer}},
				map[string]any{"handle": []any{inner}}},
		},
		{
			name:   "fail/the shorter prefix in the earlier route",
			routes: []any{map[string]any{"handle": []any{outer}}, map[string]any{"handle": []any{inner}}},
			want:   `prefix: profile "inner" (prefix /acme/a) would never be reached: profile "outer" (prefix /acme) comes before it`,
		},
		{
			name: "fail/the later route has a matcher of its own",
			routes: []any{map[string]any{"handle": []any{outer}},
				map[string]any{"match": []any{map[string]any{"host": []string{"a.example.com"}}}, "handle": []any{inner}}},
			want: `prefix: profile "inner" (prefix /acme/a) would never be reached: profile "outer" (prefix /acme) comes before it`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := isolate(t)
			cfg := validateConfig(t, dir, map[string]any{"database": filepath.Join(dir, "acme_proxy.db")}, freePort(t), nil)
			var doc map[string]any
			if err := json.Unmarshal(cfg, &doc); err != nil {
				t.Fatal(err)
			}
			doc["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)["srv0"].(map[string]any)["routes"] = tt.routes
			cfgJSON, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			err = caddyValidate(t, cfgJSON)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("valid; want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}
