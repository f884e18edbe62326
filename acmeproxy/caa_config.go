package acmeproxy

import (
	"fmt"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
)

// CAAConfig turns on CAA checking for a profile (RFC 8659, with RFC
// 8657's accounturi and validationmethods): every DNS identifier's CAA
// records are checked when its authorization validates, and again at
// finalize when that was more than 7 hours ago (an hour short of the
// Baseline Requirements' 8); the directory's
// meta.caaIdentities lists Identities. Off when absent.
type CAAConfig struct {
	// Identities are the issuer domain names by which CAA issue and
	// issuewild records name this profile ("ca.internal.example.com").
	// At least one.
	Identities []string `json:"identities"`
	// AccountURIPrefix, followed by an account's id, is the URI by which
	// an accounturi parameter names an account of this profile: the
	// profile's <base URL>/account/, as in
	// "https://ca.internal.example.com/acme/internal/account/". Unset, a
	// record with an accounturi parameter never permits issuance here.
	AccountURIPrefix string `json:"account_uri_prefix,omitempty"`
}

// Validate checks a caa block (nil is valid: off); errors name the key
// below caa.
func (c *CAAConfig) Validate() error {
	if c == nil {
		return nil
	}
	if len(c.Identities) == 0 {
		return fmt.Errorf("identities: at least one issuer domain name is required")
	}
	seen := map[string]bool{}
	for _, id := range c.Identities {
		if err := validate.CheckCAAIdentity(id); err != nil {
			return fmt.Errorf("identities: %q: %w", id, err)
		}
		if seen[id] {
			return fmt.Errorf("identities: %q listed twice", id)
		}
		seen[id] = true
	}
	if p := c.AccountURIPrefix; p != "" {
		if err := validate.CheckAccountURIPrefix(p); err != nil {
			return fmt.Errorf("account_uri_prefix: %q: %w", p, err)
		}
	}
	return nil
}

// caaChecker builds the profile's CAA checker into opts when the profile
// checks CAA and the caller has not supplied one: it asks the DNS servers
// of the profile's validator, which must then be this project's.
func (c *ProfileConfig) caaChecker(opts *Options) error {
	if c.CAA == nil || opts.CAA != nil {
		return nil
	}
	v, ok := opts.Validator.(*validate.Validator)
	if !ok {
		return fmt.Errorf("caa: the profile's validator (%T) cannot look up CAA records", opts.Validator)
	}
	chk, err := validate.NewCAAChecker(v, validate.CAAConfig{Identities: c.CAA.Identities, AccountURIPrefix: c.CAA.AccountURIPrefix})
	if err != nil {
		return fmt.Errorf("caa: %w", err)
	}
	opts.CAA = chk
	return nil
}

var _ authority.CAAChecker = (*validate.CAAChecker)(nil)

// caaIdentities are the directory's meta.caaIdentities: none when the
// profile checks no CAA.
func (c *ProfileConfig) caaIdentities() []string {
	if c.CAA == nil {
		return nil
	}
	return c.CAA.Identities
}
