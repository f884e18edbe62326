package acmeproxy

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
)

// AppConfig is the JSON of the acme_proxy app (the Caddyfile's global
// acme_proxy option). The zero value is a working default.
type AppConfig struct {
	// Database is the SQLite file; default <Caddy data dir>/acme_proxy/acme_proxy.db.
	Database string `json:"database,omitempty"`
	// Notify are the default notification destinations of every profile
	// that declares none of its own.
	Notify []notify.Destination `json:"notify,omitempty"`
	// AuditRetention is how long audit rows are kept before the hourly
	// audit_sweep deletes them: a duration in Caddy's syntax ("400d",
	// "2160h"), or "keep" to keep every row. Default DefaultAuditRetention.
	AuditRetention string `json:"audit_retention,omitempty"`
}

// DefaultAuditRetention is the audit retention when none is configured:
// more than a year, so a yearly review still finds the whole year.
const DefaultAuditRetention = 400 * 24 * time.Hour

// AuditRetentionKeep, as AppConfig.AuditRetention, keeps every audit row.
const AuditRetentionKeep = "keep"

// ProfileConfig is the JSON of one acme_proxy handler, less its signer
// (which is a guest module of its own). One handler serves one profile.
type ProfileConfig struct {
	// Profile names the profile: [a-z0-9-]+, unique across the config.
	Profile string `json:"profile"`
	// Prefix is the path the ACME endpoints live under; default /acme/<profile>.
	Prefix string `json:"prefix,omitempty"`
	// Challenges are the challenge types offered; default all three.
	Challenges []string `json:"challenges,omitempty"`
	// Resolvers are the DNS servers for dns-01 validation: IP addresses,
	// with a port or without one (port 53), never host names (see
	// validate.ResolverAddr); default the system's.
	Resolvers []string `json:"resolvers,omitempty"`
	// ValidationPorts are where http-01 and tls-alpn-01 connect; default 80/443.
	ValidationPorts *ValidationPorts `json:"validation_ports,omitempty"`
	// Allow, if set, lists what may be issued; everything else is refused.
	Allow *IdentifierPolicy `json:"allow,omitempty"`
	// Deny lists what is refused even when allowed.
	Deny *IdentifierPolicy `json:"deny,omitempty"`
	// CRLURL, when set, is the base of the CRL distribution point put in
	// every leaf of a signer that publishes a CRL (local_ca): an absolute
	// http:// URL (RFC 5280 §4.2.1.13: CRLs are fetched without TLS) that
	// reaches this profile's <prefix>/crl without a redirect to HTTPS. A
	// leaf names CRLURL + "/" + the key id of the CA that signed it, served
	// at <prefix>/crl/<key id> for as long as that CA's leaves may be
	// valid, also after the CA is renewed or replaced. Unset, leaves carry
	// no distribution point, which the glue allows only for leaves of at
	// most 7 days.
	CRLURL string `json:"crl_url,omitempty"`
	// Notify, when set, are the profile's notification destinations,
	// replacing the app's defaults (AppConfig.Notify).
	Notify []notify.Destination `json:"notify,omitempty"`
	// EAB is the profile's external account binding rule (RFC 8555
	// §7.3.4): "required" (every new account binds a key an operator
	// minted; the directory says externalAccountRequired), "optional" (a
	// new account may bind one), or unset for none (a binding is ignored).
	EAB string `json:"eab,omitempty"`
}

// ValidationPorts are the ports challenge validation connects to.
type ValidationPorts struct {
	HTTP int `json:"http,omitempty"`
	TLS  int `json:"tls,omitempty"`
}

// IdentifierPolicy is a set of names and addresses. Domains are exact
// names ("host.example.com"), "*.example.com" for any name below
// example.com, or "example.com" with a leading "." for the name and below.
type IdentifierPolicy struct {
	Domains  []string `json:"domains,omitempty"`
	IPRanges []string `json:"ip_ranges,omitempty"`
}

var profileName = regexp.MustCompile(`^[a-z0-9-]+$`)

// SetDefaults fills in what the operator left out.
func (c *ProfileConfig) SetDefaults() {
	if c.Prefix == "" && c.Profile != "" {
		c.Prefix = "/acme/" + c.Profile
	}
	c.Prefix = strings.TrimSuffix(c.Prefix, "/")
	if len(c.Challenges) == 0 {
		c.Challenges = []string{acme.ChallengeHTTP01, acme.ChallengeDNS01, acme.ChallengeTLSALPN01}
	}
	if c.ValidationPorts == nil {
		c.ValidationPorts = &ValidationPorts{}
	}
	if c.ValidationPorts.HTTP == 0 {
		c.ValidationPorts.HTTP = 80
	}
	if c.ValidationPorts.TLS == 0 {
		c.ValidationPorts.TLS = 443
	}
}

// Validate checks the configuration; each message names the offending key.
func (c *ProfileConfig) Validate() error {
	if c.Profile == "" {
		return fmt.Errorf("profile: required")
	}
	if !profileName.MatchString(c.Profile) {
		return fmt.Errorf("profile: %q must match [a-z0-9-]+", c.Profile)
	}
	if !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("prefix: %q must start with /", c.Prefix)
	}
	seen := map[string]bool{}
	for _, ch := range c.Challenges {
		switch ch {
		case acme.ChallengeHTTP01, acme.ChallengeDNS01, acme.ChallengeTLSALPN01:
		default:
			return fmt.Errorf("challenges: unknown challenge type %q (want http-01, dns-01 or tls-alpn-01)", ch)
		}
		if seen[ch] {
			return fmt.Errorf("challenges: %q listed twice", ch)
		}
		seen[ch] = true
	}
	for _, r := range c.Resolvers {
		// The rule validate.New applies, so what passes here starts.
		if _, err := validate.ResolverAddr(r); err != nil {
			return fmt.Errorf("resolvers: %q: %w", r, err)
		}
	}
	for name, p := range map[string]int{"validation_ports.http": c.ValidationPorts.HTTP, "validation_ports.tls": c.ValidationPorts.TLS} {
		if p < 1 || p > 65535 {
			return fmt.Errorf("%s: port %d out of range", name, p)
		}
	}
	if c.CRLURL != "" {
		u, err := url.Parse(c.CRLURL)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
			return fmt.Errorf("crl_url: %q must be an absolute http:// URL (CRLs are fetched without TLS)", c.CRLURL)
		}
	}
	switch c.EAB {
	case "", authority.EABRequired, authority.EABOptional:
	default:
		return fmt.Errorf("eab: %q must be required or optional", c.EAB)
	}
	for i := range c.Notify {
		if err := c.Notify[i].Validate(); err != nil {
			return err
		}
	}
	for key, pol := range map[string]*IdentifierPolicy{"allow": c.Allow, "deny": c.Deny} {
		if err := pol.validate(); err != nil {
			return fmt.Errorf("%s.%w", key, err)
		}
	}
	return nil
}

func (p *IdentifierPolicy) validate() error {
	if p == nil {
		return nil
	}
	for _, d := range p.Domains {
		base := strings.TrimPrefix(strings.TrimPrefix(d, "*."), ".")
		if _, err := normalizeDNSName(base); err != nil {
			return fmt.Errorf("domains: %q: %w", d, err)
		}
	}
	for _, r := range p.IPRanges {
		if _, err := parseIPRange(r); err != nil {
			return fmt.Errorf("ip_ranges: %w", err)
		}
	}
	return nil
}
