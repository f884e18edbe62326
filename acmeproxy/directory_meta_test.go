package acmeproxy

import (
	"encoding/json"
	"net/http"
	"testing"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
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

// RFC 8555 §7.3: a server that names terms of service in its directory
// "MUST reject newAccount requests that do not have the
// "termsOfServiceAgreed" field set to "true"" (Boulder and Pebble answer
// malformed). A key that already has an account is shown it, agreement
// or not (§7.3.1), and without terms there is nothing to agree to.
func TestANewAccountMustAgreeToTheTermsOfServiceTheDirectoryNames(t *testing.T) {
	const tos = "https://ca.example.test/terms.html"
	tests := []struct {
		name       string
		tos        string
		existing   bool // the key already has an account (which agreed)
		payload    map[string]any
		wantStatus int
	}{
		{"fail/terms named, agreement absent", tos, false, map[string]any{"contact": []string{"mailto:a@example.com"}}, http.StatusBadRequest},
		{"fail/terms named, agreement false", tos, false, map[string]any{"termsOfServiceAgreed": false}, http.StatusBadRequest},
		{"ok/terms named, agreement true", tos, false, map[string]any{"termsOfServiceAgreed": true}, http.StatusCreated},
		{"ok/no terms named, agreement absent", "", false, map[string]any{}, http.StatusCreated},
		{"ok/terms named, the key's existing account is shown without agreement", tos, true, map[string]any{}, http.StatusOK},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				e := newTestEnv(t, func(c *ProfileConfig) { c.TermsOfService = tc.tos })
				c := e.rawClient()
				if tc.existing {
					c.registerWith(map[string]any{"termsOfServiceAgreed": true})
				}
				r := c.post(e.url("/new-account"), tc.payload, jwsOpts{embedJWK: true})
				if r.status != tc.wantStatus {
					t.Fatalf("new-account: %d %s, want %d", r.status, r.body, tc.wantStatus)
				}
				if tc.wantStatus == http.StatusBadRequest {
					wantProblem(t, r, http.StatusBadRequest, vocab.ErrorMalformed)
					again := c.post(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{embedJWK: true})
					wantProblem(t, again, http.StatusBadRequest, vocab.ErrorAccountDoesNotExist)
				}
			})
		}
	})
}
