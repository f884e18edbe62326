package acmeproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
)

var idnaProfile = idna.New(idna.ValidateForRegistration(), idna.StrictDomainName(true))

// normalizeDNSName lower-cases a name and checks it is a syntactically
// valid host name: LDH labels of 1–63 octets, 253 octets in all, no
// trailing dot, A-labels only (clients must send punycode, RFC 8555
// §7.1.4), not an IP address, a top-level label not all digits. A single
// label ("localhost", "nas") is a host name too: internal CAs issue them
// (Caddy's acme_server and `tls internal` do), and a profile that must
// not issue them lists them in its deny policy.
func normalizeDNSName(name string) (string, error) {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return "", errors.New("name has a non-ASCII character (internationalized names are sent as A-labels)")
		}
	}
	n := strings.ToLower(name)
	switch {
	case n == "":
		return "", errors.New("empty name")
	case len(n) > 253:
		return "", errors.New("name longer than 253 octets")
	case strings.HasSuffix(n, "."):
		return "", errors.New("name ends with a dot")
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "", errors.New("an IP address is not a dns identifier")
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("label %q must be 1 to 63 octets", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with a hyphen", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("label %q has a character outside a-z, 0-9 and -", l)
			}
		}
		if len(l) >= 4 && l[2:4] == "--" && !strings.HasPrefix(l, "xn--") {
			return "", fmt.Errorf("label %q is a reserved LDH label (\"--\" in positions 3 and 4) but not an A-label", l)
		}
		if strings.HasPrefix(l, "xn--") {
			if _, err := idnaProfile.ToUnicode(l); err != nil {
				return "", fmt.Errorf("label %q is not a valid A-label", l)
			}
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return "", errors.New("top-level label is all digits")
	}
	return n, nil
}

// normalizeIdentifier checks an identifier's syntax and returns its
// canonical form (lower-case names; IP addresses in RFC 5952 form), and
// whether it is a wildcard.
func normalizeIdentifier(id acme.Identifier) (acme.Identifier, bool, *problem.Problem) {
	switch id.Type {
	case acme.IdentifierDNS:
		name, wildcard := id.Value, false
		if strings.HasPrefix(name, "*.") {
			name, wildcard = name[2:], true
		}
		n, err := normalizeDNSName(name)
		if err != nil {
			return id, false, problem.RejectedIdentifierF("%s is not a valid DNS name: %v", problem.Quote(id.Value), err).For(id.Type, id.Value)
		}
		if wildcard {
			// NSS (Firefox), rustls' webpki and Chromium match no wildcard
			// over a single label, and "*.com" would vouch for a whole
			// top-level domain (RFC 6125 §7.2): "*.nas" is refused.
			if !strings.Contains(n, ".") {
				return id, false, problem.RejectedIdentifierF("%s is not a valid DNS name: a wildcard needs at least two labels after it", problem.Quote(id.Value)).For(id.Type, id.Value)
			}
			n = "*." + n
			if len(n) > 253 {
				return id, false, problem.RejectedIdentifierF("%s is not a valid DNS name: name longer than 253 octets", problem.Quote(id.Value)).For(id.Type, id.Value)
			}
		}
		return acme.Identifier{Type: acme.IdentifierDNS, Value: n}, wildcard, nil
	case acme.IdentifierIP:
		ip, err := netip.ParseAddr(id.Value)
		if err != nil || ip.Zone() != "" {
			return id, false, problem.MalformedF("%s is not an IP address", problem.Quote(id.Value)).For(id.Type, id.Value)
		}
		// Validation never connects to such an address (it is no one
		// host's), so its authorization could only ever expire: refused
		// at newOrder, before it is stored or the client tries.
		if why := validate.NeverDialled(ip); why != "" {
			return id, false, problem.RejectedIdentifierF("%s is %s, which cannot be validated", problem.Quote(id.Value), why).For(id.Type, id.Value)
		}
		return acme.Identifier{Type: acme.IdentifierIP, Value: ip.Unmap().String()}, false, nil
	default:
		return id, false, problem.UnsupportedIdentifierF("identifier type %s is not supported (use dns or ip)", problem.Quote(id.Type)).For(id.Type, id.Value)
	}
}

// policy decides which identifiers a profile issues for.
type policy struct {
	allow, deny *matcher
}

type matcher struct {
	exact    map[string]bool
	suffixes []string // ".example.com": any name strictly below
	prefixes []netip.Prefix
}

func newMatcher(p *IdentifierPolicy) *matcher {
	if p == nil {
		return nil
	}
	m := &matcher{exact: map[string]bool{}}
	for _, d := range p.Domains {
		d = strings.ToLower(d)
		switch {
		case strings.HasPrefix(d, "*."):
			m.suffixes = append(m.suffixes, d[1:])
		case strings.HasPrefix(d, "."):
			m.exact[d[1:]] = true
			m.suffixes = append(m.suffixes, d)
		default:
			m.exact[d] = true
		}
	}
	for _, r := range p.IPRanges {
		if pfx, err := parseIPRange(r); err == nil {
			m.prefixes = append(m.prefixes, pfx)
		}
	}
	return m
}

// parseIPRange reads an ip_ranges entry, a CIDR range or a single address,
// as the masked prefix it matches. Identifiers are matched unmapped
// (normalizeIdentifier), so an IPv4-mapped IPv6 range is unmapped too:
// ::ffff:10.0.0.0/104 is 10.0.0.0/8, ::ffff:192.0.2.1 is 192.0.2.1/32.
// Left as it is it would match nothing, and a deny written that way would
// silently refuse nothing. A mapped range shorter than /96 spans more
// than the mapped addresses and has no IPv4 equivalent: it is an error.
func parseIPRange(r string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(r)
	if err != nil {
		ip, err2 := netip.ParseAddr(r)
		if err2 != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR range or address", r)
		}
		pfx = netip.PrefixFrom(ip, ip.BitLen())
	}
	if pfx.Addr().Is4In6() {
		if pfx.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped IPv6 range shorter than /96, which no IPv4 range matches; write the IPv4 range (or an IPv6 one without ::ffff:)", r)
		}
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked(), nil
}

// matches reports whether a normalized identifier is in the set. A
// wildcard "*.a.example" is in the set when "*.a.example" is listed
// exactly or its base lies strictly under a listed suffix.
func (m *matcher) matches(id acme.Identifier) bool {
	if id.Type == acme.IdentifierIP {
		ip, err := netip.ParseAddr(id.Value)
		if err != nil {
			return false
		}
		for _, p := range m.prefixes {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	if m.exact[id.Value] {
		return true
	}
	name := strings.TrimPrefix(id.Value, "*.")
	for _, s := range m.suffixes {
		if strings.HasSuffix(name, s) && len(name) > len(s) {
			return true
		}
		// "*.example.com" as a wildcard order under "*.example.com" policy.
		if strings.HasPrefix(id.Value, "*.") && "."+name == s {
			return true
		}
	}
	return false
}

// wildcardCovers reports whether the wildcard id ("*.base") would cover a
// name the set lists exactly: a certificate for *.example.com is valid
// for secret.example.com (RFC 6125 §6.4.3).
func (m *matcher) wildcardCovers(id acme.Identifier) bool {
	base, ok := strings.CutPrefix(id.Value, "*.")
	if !ok || id.Type != acme.IdentifierDNS {
		return false
	}
	for name := range m.exact {
		if _, parent, ok := strings.Cut(name, "."); ok && parent == base {
			return true
		}
	}
	return false
}

// RedirectPolicy returns the check http-01 validation applies to the host
// of a redirect (validate.Config.RedirectPolicy): the host, a DNS name,
// must be one this profile would issue for, so that a client cannot point
// validation at a host outside the profile's policy. A host that is not a
// valid DNS name is refused; one trailing dot is allowed, and ignored.
func (c *ProfileConfig) RedirectPolicy() func(host string) error {
	pol := newPolicy(c.Allow, c.Deny)
	return func(host string) error {
		name, err := normalizeDNSName(strings.TrimSuffix(host, "."))
		if err != nil {
			return fmt.Errorf("%q is not a valid DNS name: %w", host, err)
		}
		if p := pol.check(acme.Identifier{Type: acme.IdentifierDNS, Value: name}); p != nil {
			return errors.New(p.Detail)
		}
		return nil
	}
}

func newPolicy(allow, deny *IdentifierPolicy) policy {
	return policy{allow: newMatcher(allow), deny: newMatcher(deny)}
}

// check returns a rejectedIdentifier subproblem if the profile does not
// issue for id.
func (p policy) check(id acme.Identifier) *problem.Problem {
	if p.deny != nil && (p.deny.matches(id) || p.deny.wildcardCovers(id)) {
		return problem.RejectedIdentifierF("%s is denied by this profile's policy", id.Value).For(id.Type, id.Value)
	}
	if p.allow != nil && !p.allow.matches(id) {
		return problem.RejectedIdentifierF("%s is not allowed by this profile's policy", id.Value).For(id.Type, id.Value)
	}
	return nil
}
