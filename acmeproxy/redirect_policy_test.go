package acmeproxy

import (
	"strings"
	"testing"
)

// A redirect of http-01 may only reach a host the profile would issue for:
// the check applies the allow and deny lists to the redirect's host as to
// a dns identifier, and refuses a host that is no valid DNS name, so that
// no spelling (case, a trailing dot) slips past a deny.
func TestTheRedirectPolicyAppliesTheProfilesIdentifierPolicyToTheHost(t *testing.T) {
	cfg := ProfileConfig{
		Profile: "p",
		Allow:   &IdentifierPolicy{Domains: []string{".example.com"}},
		Deny:    &IdentifierPolicy{Domains: []string{"secret.example.com", "*.internal.example.com"}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	check := cfg.RedirectPolicy()
	tests := []struct {
		name string
		host string
		want string // "": allowed; else in the error
	}{
		{name: "ok/an allowed name", host: "www.example.com"},
		{name: "ok/the allowed apex", host: "example.com"},
		{name: "ok/an allowed name in another case", host: "WWW.Example.COM"},
		{name: "ok/an allowed name with a trailing dot", host: "www.example.com."},
		{name: "fail/a denied name", host: "secret.example.com", want: "denied by this profile's policy"},
		{name: "fail/a denied name in another case", host: "SECRET.example.com", want: "denied by this profile's policy"},
		{name: "fail/a denied name with a trailing dot", host: "secret.example.com.", want: "denied by this profile's policy"},
		{name: "fail/a name below a denied wildcard", host: "db.internal.example.com", want: "denied by this profile's policy"},
		{name: "fail/a name outside the allow list", host: "intranet.corp.test", want: "not allowed by this profile's policy"},
		{name: "fail/a single-label name outside the allow list", host: "localhost", want: "not allowed by this profile's policy"},
		{name: "fail/two trailing dots", host: "secret.example.com..", want: "not a valid DNS name"},
		{name: "fail/a non-ASCII name", host: "wwẉ.example.com", want: "not a valid DNS name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(tt.host)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestWithoutAPolicyTheRedirectPolicyAllowsAnyValidName(t *testing.T) {
	cfg := ProfileConfig{Profile: "p"}
	check := cfg.RedirectPolicy()
	if err := check("anything.example.net"); err != nil {
		t.Errorf("a valid name refused without a policy: %v", err)
	}
	// A single-label name is an identifier like any other (the dialer
	// still never reaches a link-local address such a name may have).
	if err := check("nas"); err != nil {
		t.Errorf("a single-label name refused without a policy: %v", err)
	}
	if err := check("nas.."); err == nil {
		t.Error("a name with two trailing dots allowed")
	}
}
