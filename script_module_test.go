package caddyacmeproxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// scriptSite is a site with one profile whose signer block is block.
func scriptSite(block string) string {
	return "https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tsigner script {\n" + block + "\n\t\t}\n\t}\n}\n"
}

func TestBadScriptSignerSettingsFailWithAnErrorNamingTheKey(t *testing.T) {
	const cmd = "command /usr/local/bin/sign-cert\n"
	tests := []struct {
		name, block, want string
	}{
		{"missing command", "timeout 30s", "acme_proxy: signer.command: required by signer script"},
		{"command without a value", "command", "acme_proxy: signer.command: want at least one value"},
		{"timeout that is not a duration", cmd + "timeout soon", `acme_proxy: signer.timeout: "soon" is not a duration`},
		{"negative timeout", cmd + "timeout -5s", `acme_proxy: signer.timeout: "-5s" must be positive`},
		{"env with a name only", cmd + "env CA_DIR", "acme_proxy: signer.env: want a name and a value, got 1 values"},
		{"env set twice", cmd + "env A 1\nenv A 2", "acme_proxy: signer.env: A is set twice"},
		{"revoke neither on nor off", cmd + "revoke yes", `acme_proxy: signer.revoke: "yes" must be on or off`},
		{"unknown setting", cmd + "directory https://x", `acme_proxy: signer script: unknown setting "directory"`},
		{"command given twice", cmd + "command /usr/local/bin/other-signer", "acme_proxy: signer.command: given twice"},
		{"timeout given twice", cmd + "timeout 30s\ntimeout 1m", "acme_proxy: signer.timeout: given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(scriptSite(tt.block)), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("adapt: %v; want %q", err, tt.want)
			}
		})
	}
}

func TestTheScriptSignerBlockAdaptsToItsJSON(t *testing.T) {
	block := "command /usr/local/bin/sign-cert --ca internal \"two words\"\ntimeout 30s\nenv CA_DIR /srv/ca\nenv PASS {env.SIGN_PASS}\nrevoke off"
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(scriptSite(block)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []struct {
							Routes []struct {
								Handle []struct {
									Signer json.RawMessage `json:"signer"`
								} `json:"handle"`
							} `json:"routes"`
						} `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	var got string
	for _, s := range cfg.Apps.HTTP.Servers {
		got = string(s.Routes[0].Handle[0].Routes[0].Handle[0].Signer)
	}
	want := `{"command":["/usr/local/bin/sign-cert","--ca","internal","two words"],"env":{"CA_DIR":"/srv/ca","PASS":"{env.SIGN_PASS}"},"module":"script","revoke":false,"timeout":30000000000}`
	if got != want {
		t.Errorf("signer JSON:\n%s\nwant:\n%s\n(whole config: %s)", got, want, out)
	}
}

func TestAScriptSignerWhoseCommandCannotRunFailsAtProvisionNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		s    Script
		want string
	}{
		{"no command", Script{}, "signer.command: required"},
		{"a relative command", Script{Command: []string{"sign-cert"}}, `signer.command: "sign-cert" must be an absolute path`},
		{"a missing command", Script{Command: []string{"/nonexistent/sign-cert"}}, "signer.command: stat /nonexistent/sign-cert"},
		{"a negative timeout", Script{Command: []string{"/bin/true"}, Timeout: caddy.Duration(-time.Second)}, "signer.timeout: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Provision(caddy.Context{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Provision: %v; want %q", err, tt.want)
			}
		})
	}
}
