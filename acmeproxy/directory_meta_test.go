package acmeproxy

import (
	"encoding/json"
	"net/http"
	"testing"
)

// RFC 8555 §7.1.1: the directory's meta names the profile's terms of
// service and website when the operator configured them (which clients
// such as certbot show their users), and leaves them out otherwise.
func TestTheDirectoryMetaNamesTheTermsOfServiceAndWebsiteWhenConfigured(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name              string
			tos, website      string
			wantTOS, wantSite string // "" for absent
		}{
			{"both configured", "https://ca.example.test/terms-v2.html", "https://ca.example.test/", "https://ca.example.test/terms-v2.html", "https://ca.example.test/"},
			{"only the terms", "http://ca.example.test/terms", "", "http://ca.example.test/terms", ""},
			{"neither", "", "", "", ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				e := newTestEnv(t, func(c *ProfileConfig) { c.TermsOfService, c.Website = tc.tos, tc.website })
				r := e.plain(http.MethodGet, e.dirURL)
				if r.status != http.StatusOK {
					t.Fatalf("directory: %d %s", r.status, r.body)
				}
				var dir struct {
					Meta map[string]json.RawMessage `json:"meta"`
				}
				if err := json.Unmarshal(r.body, &dir); err != nil {
					t.Fatal(err)
				}
				for field, want := range map[string]string{"termsOfService": tc.wantTOS, "website": tc.wantSite} {
					raw, present := dir.Meta[field]
					var got string
					if present {
						_ = json.Unmarshal(raw, &got)
					}
					if present != (want != "") || got != want {
						t.Errorf("meta.%s = %s (present %v), want %q", field, raw, present, want)
					}
				}
			})
		}
	})
}
