package acmeproxy

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
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
	// OrderRetention is how long the hourly retention_sweep keeps an
	// order that never got a certificate once it expired or failed, and a
	// deactivated account once it has no order left: a duration in
	// Caddy's syntax, or "keep". Default DefaultOrderRetention.
	OrderRetention string `json:"order_retention,omitempty"`
	// CertificateRetention is how long the retention_sweep keeps a
	// certificate, with its revocation row and its order, past its
	// notAfter (one revoked for keyCompromise is kept for good: it keeps
	// its key from being certified again): a duration in Caddy's syntax,
	// or "keep". Default DefaultCertificateRetention.
	CertificateRetention string `json:"certificate_retention,omitempty"`
}

// Default retention of orders and certificates: a failed order stays a
// month for the operator to look into; a certificate stays a quarter past
// its expiry for revocation requests, the audit trail's references and
// ARI to find it.
const (
	DefaultOrderRetention       = 30 * 24 * time.Hour
	DefaultCertificateRetention = 90 * 24 * time.Hour
)

// DefaultAuditRetention is the audit retention when none is configured:
// more than a year, so a yearly review still finds the whole year.
const DefaultAuditRetention = 400 * 24 * time.Hour

// AuditRetentionKeep, as AppConfig.AuditRetention, keeps every audit row;
// as OrderRetention or CertificateRetention, every order or certificate.
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
	// CertificateProfiles are the certificate profiles offered
	// (draft-ietf-acme-profiles: the directory's meta.profiles, newOrder's
	// "profile"), by name, which is [a-z0-9-]+.
	CertificateProfiles map[string]*CertificateProfileConfig `json:"certificate_profiles,omitempty"`
	// DefaultCertificateProfile, when set, names the certificate profile
	// an order that asks for none gets; unset, such an order gets the
	// signer's plain leaf.
	DefaultCertificateProfile string `json:"default_certificate_profile,omitempty"`
	// TermsOfService and Website, when set, are the directory's
	// meta.termsOfService and meta.website (RFC 8555 §7.1.1): the URL of
	// the profile's current terms of service, which clients show their
	// users to agree to, and of a web page about this CA. Each an absolute
	// http:// or https:// URL.
	TermsOfService string `json:"terms_of_service,omitempty"`
	Website        string `json:"website,omitempty"`
	// EAB is the profile's external account binding rule (RFC 8555
	// §7.3.4): "required" (every new account binds a key an operator
	// minted; the directory says externalAccountRequired), "optional" (a
	// new account may bind one), or unset for none (a binding is ignored).
	EAB string `json:"eab,omitempty"`
	// RenewalInfo places the renewal windows renewalInfo suggests (RFC
	// 9773); unset, the defaults (see RenewalInfoConfig).
	RenewalInfo *RenewalInfoConfig `json:"renewal_info,omitempty"`
	// Limits are the profile's rate limits (see LimitsConfig); left out,
	// every limit has its default.
	Limits *LimitsConfig `json:"limits,omitempty"`
	// CAA, when set, turns on CAA checking (caa_config.go).
	CAA *CAAConfig `json:"caa,omitempty"`
}

// CertificateProfileConfig is one certificate profile.
type CertificateProfileConfig struct {
	// Description is shown to clients in the directory.
	Description string `json:"description,omitempty"`
	// Lifetime caps the leaf's validity ("24h", "30d", or nanoseconds);
	// it may not exceed the signer's own lifetime. Default the signer's.
	Lifetime Duration `json:"lifetime,omitempty"`
	// ExtKeyUsage are the leaf's extended key usages: server_auth,
	// client_auth. Default server_auth.
	ExtKeyUsage []string `json:"ext_key_usage,omitempty"`
	// KeyTypes are the CSR key types taken: ec256, ec384, ed25519,
	// rsa2048, rsa3072, rsa4096, rsa8192. Default every supported key.
	KeyTypes []string `json:"key_types,omitempty"`
	// MaxIdentifiers, when positive, bounds an order's identifiers.
	MaxIdentifiers int `json:"max_identifiers,omitempty"`
	// CommonName, when false, leaves the subject's common name out of
	// the leaf. Default true.
	CommonName *bool `json:"common_name,omitempty"`
	// UpstreamProfile, with a relay signer, is the upstream CA's
	// certificate profile its orders for this one ask for (the upstream
	// directory's meta.profiles: "shortlived", "tlsserver"…). Unset, the
	// upstream's default.
	UpstreamProfile string `json:"upstream_profile,omitempty"`
}

// extKeyUsages are the ext_key_usage names.
var extKeyUsages = map[string]x509.ExtKeyUsage{
	"server_auth": x509.ExtKeyUsageServerAuth,
	"client_auth": x509.ExtKeyUsageClientAuth,
}

// Duration is a duration in JSON: a string in Go's syntax or with a "d"
// (days) suffix, or a number of nanoseconds (what caddy.Duration writes).
type Duration time.Duration

// UnmarshalJSON reads a Duration.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return notADuration(string(b) + ", which is not a duration (a string such as \"90d\" or \"12h\", or a number of nanoseconds),")
		}
		*d = Duration(n)
		return nil
	}
	v, err := parseDuration(s)
	if err != nil {
		return notADuration(strconv.Quote(s) + ", which is not a duration (such as 90d, 12h),")
	}
	*d = Duration(v)
	return nil
}

// notADuration is UnmarshalJSON's refusal of a value, what. It is a
// *json.UnmarshalTypeError because the decoder completes that type alone
// with the path of the field at fault, so that the error names the key:
// `json: cannot unmarshal "1 hour", which is not a duration (such as
// 90d, 12h), into Go struct field
// CertificateProfileConfig.certificate_profiles.lifetime of type
// acmeproxy.Duration`.
func notADuration(what string) error {
	return &json.UnmarshalTypeError{Value: what, Type: reflect.TypeFor[Duration]()}
}

// MarshalJSON writes a Duration as a string ParseDuration reads.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// parseDuration is time.ParseDuration, also taking whole days ("30d").
func parseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 100*365 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// minCertificateLifetime is the shortest lifetime a certificate profile
// may give, exclusive: local_ca's backdate.
const minCertificateLifetime = time.Minute

// Validate checks one certificate profile; errors name the key below
// certificate_profiles.<name>.
func (cp *CertificateProfileConfig) Validate() error {
	if cp.Lifetime < 0 {
		return fmt.Errorf("lifetime: must be positive, not %s", time.Duration(cp.Lifetime))
	}
	if cp.Lifetime != 0 && time.Duration(cp.Lifetime) <= minCertificateLifetime {
		// local_ca starts a leaf a minute early: one that short would
		// have ended before it is issued.
		return fmt.Errorf("lifetime: %s is too short; more than %s", time.Duration(cp.Lifetime), minCertificateLifetime)
	}
	if cp.MaxIdentifiers < 0 {
		return fmt.Errorf("max_identifiers: must be positive, not %d", cp.MaxIdentifiers)
	}
	seen := map[string]bool{}
	for _, u := range cp.ExtKeyUsage {
		if _, ok := extKeyUsages[u]; !ok {
			return fmt.Errorf("ext_key_usage: unknown extended key usage %q (want server_auth or client_auth)", u)
		}
		if seen[u] {
			return fmt.Errorf("ext_key_usage: %q listed twice", u)
		}
		seen[u] = true
	}
	for _, k := range cp.KeyTypes {
		if !slices.Contains(authority.KeyTypes, k) {
			return fmt.Errorf("key_types: unknown key type %q (want one of %s)", k, strings.Join(authority.KeyTypes, ", "))
		}
	}
	if u := cp.UpstreamProfile; u != "" && !upstreamProfileName.MatchString(u) {
		return fmt.Errorf("upstream_profile: %q is not a profile name (up to 64 letters, digits, '-', '_' or '.')", u)
	}
	return nil
}

// upstreamProfileName bounds what is sent upstream as a profile name: the
// draft leaves names to the CA; these are what CAs use.
var upstreamProfileName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// authorityProfiles is the certificate profiles as the authority takes
// them (validated).
func (c *ProfileConfig) authorityProfiles() map[string]authority.CertificateProfile {
	if len(c.CertificateProfiles) == 0 {
		return nil
	}
	out := make(map[string]authority.CertificateProfile, len(c.CertificateProfiles))
	for name, cp := range c.CertificateProfiles {
		a := authority.CertificateProfile{Description: cp.Description, KeyTypes: cp.KeyTypes, MaxIdentifiers: cp.MaxIdentifiers}
		a.Name, a.Lifetime = name, time.Duration(cp.Lifetime)
		for _, u := range cp.ExtKeyUsage {
			a.ExtKeyUsage = append(a.ExtKeyUsage, extKeyUsages[u])
		}
		a.OmitCommonName = cp.CommonName != nil && !*cp.CommonName
		a.UpstreamProfile = cp.UpstreamProfile
		out[name] = a
	}
	return out
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

// MaxProfileName bounds a profile's name as DNS bounds a label: it names
// the profile in URLs, the admin API's routes and every row it owns.
const MaxProfileName = 63

// CheckProfileName says what is wrong with a profile's name, if anything,
// in words that follow the key's name; the Caddyfile adapter asks it too,
// so a typo fails when the Caddyfile is adapted.
func CheckProfileName(name string) error {
	if !profileName.MatchString(name) {
		return fmt.Errorf("%q must match [a-z0-9-]+", name)
	}
	if len(name) > MaxProfileName {
		return fmt.Errorf("a name of %d characters; at most %d", len(name), MaxProfileName)
	}
	return nil
}

// CheckCertificateProfileName is CheckProfileName's rule for the names a
// client picks in newOrder, which the wire bounds no further.
func CheckCertificateProfileName(name string) error {
	if !profileName.MatchString(name) {
		return fmt.Errorf("%q must match [a-z0-9-]+", name)
	}
	return nil
}

// CheckPrefix accepts a path of one or more segments of RFC 3986's
// unreserved characters, none of them . or .. — what a URL carries as it
// is and net/http's ServeMux takes literally: a pattern's wildcards
// ({x}), an unclean path (which ServeMux refuses with a panic) or an
// escape would otherwise match something else than was written, or
// nothing.
func CheckPrefix(p string) error {
	bad := fmt.Errorf("%q must be a path of segments of letters, digits and -._~ (for example /acme/internal)", p)
	if !strings.HasPrefix(p, "/") {
		return bad
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
				return bad
			}
		}
	}
	return nil
}

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
	if err := CheckProfileName(c.Profile); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if err := CheckPrefix(c.Prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
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
	for key, v := range map[string]string{"terms_of_service": c.TermsOfService, "website": c.Website} {
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return fmt.Errorf("%s: %q must be an absolute http:// or https:// URL", key, v)
		}
	}
	switch c.EAB {
	case "", authority.EABRequired, authority.EABOptional:
	default:
		return fmt.Errorf("eab: %q must be required or optional", c.EAB)
	}
	if err := c.CAA.Validate(); err != nil {
		return fmt.Errorf("caa.%w", err)
	}
	for i := range c.Notify {
		if err := c.Notify[i].Validate(); err != nil {
			return err
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("limits.%w", err)
	}
	for name, cp := range c.CertificateProfiles {
		if err := CheckCertificateProfileName(name); err != nil {
			return fmt.Errorf("certificate_profiles: name %w", err)
		}
		if cp == nil {
			return fmt.Errorf("certificate_profiles.%s: is null; {} is a certificate profile with every default", name)
		}
		if err := cp.Validate(); err != nil {
			return fmt.Errorf("certificate_profiles.%s.%w", name, err)
		}
	}
	if err := c.RenewalInfo.authority().Validate(); err != nil {
		return fmt.Errorf("renewal_info.%w", err)
	}
	if d := c.DefaultCertificateProfile; d != "" && c.CertificateProfiles[d] == nil {
		return fmt.Errorf("default_certificate_profile: %q is not a configured certificate profile", d)
	}
	for key, pol := range map[string]*IdentifierPolicy{"allow": c.Allow, "deny": c.Deny} {
		if err := pol.validate(); err != nil {
			return fmt.Errorf("%s.%w", key, err)
		}
	}
	// An allow that no identifier could pass refuses every order.
	if c.Allow != nil && len(c.Allow.Domains) == 0 && len(c.Allow.IPRanges) == 0 {
		return fmt.Errorf("allow: lists no domains and no ip_ranges, so every order would be refused; leave allow out to allow every name")
	}
	if c.Allow != nil && len(c.Allow.IPRanges) > 0 &&
		!slices.Contains(c.Challenges, acme.ChallengeHTTP01) && !slices.Contains(c.Challenges, acme.ChallengeTLSALPN01) {
		return fmt.Errorf("allow.ip_ranges: an IP address is validated by http-01 or tls-alpn-01 (RFC 8738), and challenges lists neither")
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
