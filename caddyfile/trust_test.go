package caddyfile_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// With the global skip_install_trust, no CA of Caddy's pki app that a
// profile signs with is installed into the system's trust store, whatever
// auto_https says. Caddy applies the option to the CAs a Caddyfile names
// (acme_server's, tls internal's); with `auto_https off` it names none,
// and the pki app's default CA, which local_ca signs with, used to keep
// install_trust on.
func TestSkipInstallTrustReachesEveryCaddyCAAProfileSignsWith(t *testing.T) {
	tests := []struct {
		name      string
		autoHTTPS string
		signer    string
		wantCAs   []string // each with install_trust false
	}{
		{"auto_https off, the default signer", "auto_https off", "", []string{"local"}},
		{"auto_https off, a named Caddy CA", "auto_https off", "signer local_ca {\n\t\t\tca other\n\t\t}", []string{"other"}},
		{"auto_https off, a CA from PEM files", "auto_https off", "signer local_ca {\n\t\t\tcert /etc/ca.pem\n\t\t\tkey /etc/ca.key\n\t\t}", nil},
		{"auto_https on, the default signer", "", "", []string{"local"}},
		{"auto_https on, a named Caddy CA", "", "signer local_ca {\n\t\t\tca other\n\t\t}", []string{"local", "other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			global, block := "\tskip_install_trust\n", "\t\tprofile internal\n"
			if tc.autoHTTPS != "" {
				global += "\t" + tc.autoHTTPS + "\n"
			}
			if tc.signer != "" {
				block += "\t\t" + tc.signer + "\n"
			}
			caddyfile := "{\n" + global + "}\n\nhttp://ca.example.test:8080 {\n\tacme_proxy {\n" + block + "\t}\n}\n"
			var cfg struct {
				Apps struct {
					PKI struct {
						CAs map[string]struct {
							InstallTrust *bool `json:"install_trust"`
						} `json:"certificate_authorities"`
					} `json:"pki"`
				} `json:"apps"`
			}
			if err := json.Unmarshal([]byte(adapt(t, caddyfile)), &cfg); err != nil {
				t.Fatal(err)
			}
			got := slices.Sorted(maps.Keys(cfg.Apps.PKI.CAs))
			if !slices.Equal(got, tc.wantCAs) {
				t.Errorf("the pki app names CAs %v; want %v", got, tc.wantCAs)
			}
			for id, ca := range cfg.Apps.PKI.CAs {
				if ca.InstallTrust == nil || *ca.InstallTrust {
					t.Errorf("CA %q: install_trust is not false: Caddy would install its root into the system's trust store", id)
				}
			}
		})
	}
}
