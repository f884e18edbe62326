package acmeproxy

import (
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

func dnsIdent(v string) acme.Identifier { return acme.Identifier{Type: acme.IdentifierDNS, Value: v} }
func ipIdent(v string) acme.Identifier  { return acme.Identifier{Type: acme.IdentifierIP, Value: v} }

// label returns a DNS label of n octets.
func label(n int) string { return strings.Repeat("a", n) }

// nameOf returns a name of exactly n octets ending in ".example.com".
func nameOf(n int) string {
	suffix := ".example.com"
	var labels []string
	for rest := n - len(suffix); rest > 0; {
		l := min(rest, 63)
		if rest-l == 1 { // leave no room for an empty label
			l--
		}
		labels = append(labels, label(l))
		rest -= l + 1
	}
	return strings.Join(labels, ".") + suffix
}

func TestNormalizeIdentifierCanonicalizesWhatItAcceptsAndRefusesTheRest(t *testing.T) {
	if n := len(nameOf(253)); n != 253 {
		t.Fatalf("nameOf(253) has %d octets", n)
	}
	tests := []struct {
		name         string
		in           acme.Identifier
		want         acme.Identifier // when wantType is ""
		wantWildcard bool
		wantType     acme.ProblemType // "" for accepted
	}{
		// RFC 8555 §7.1.4: names are compared and stored in lower case.
		{name: "ok/a DNS name is lower-cased", in: dnsIdent("WWW.Example.COM"), want: dnsIdent("www.example.com")},
		{name: "ok/a name with digits and hyphens inside labels is kept", in: dnsIdent("a-1.9b.example.com"), want: dnsIdent("a-1.9b.example.com")},
		{name: "ok/a top-level label mixing digits and letters is kept", in: dnsIdent("host.example.a1"), want: dnsIdent("host.example.a1")},
		{name: "ok/a 63-octet label is kept", in: dnsIdent(label(63) + ".example.com"), want: dnsIdent(label(63) + ".example.com")},
		{name: "ok/a 253-octet name is kept", in: dnsIdent(nameOf(253)), want: dnsIdent(nameOf(253))},
		// A single-label host name is a name an internal CA issues, as
		// Caddy's acme_server and `tls internal` do; the policy may refuse it.
		{name: "ok/localhost is kept", in: dnsIdent("localhost"), want: dnsIdent("localhost")},
		{name: "ok/a single-label host name is lower-cased", in: dnsIdent("NAS"), want: dnsIdent("nas")},
		// RFC 8555 §7.1.4: internationalized names arrive as A-labels.
		{name: "ok/a valid A-label is kept", in: dnsIdent("xn--bcher-kva.example"), want: dnsIdent("xn--bcher-kva.example")},
		{name: "ok/an upper-case A-label is lower-cased", in: dnsIdent("XN--BCHER-KVA.Example"), want: dnsIdent("xn--bcher-kva.example")},
		// RFC 8555 §7.1.3: a wildcard keeps its "*." in the order.
		{name: "ok/a wildcard keeps its prefix and is reported as one", in: dnsIdent("*.Example.COM"), want: dnsIdent("*.example.com"), wantWildcard: true},
		// RFC 8738 §3 and RFC 5952 §4: addresses in canonical text form.
		{name: "ok/an IPv4 address is kept", in: ipIdent("192.0.2.1"), want: ipIdent("192.0.2.1")},
		{name: "ok/an IPv6 address is written in RFC 5952 form", in: ipIdent("2001:0DB8:0000:0000:0000:0000:0000:0001"), want: ipIdent("2001:db8::1")},
		{name: "ok/an IPv6 address keeps the longest zero run compressed", in: ipIdent("2001:db8:0:0:1:0:0:1"), want: ipIdent("2001:db8::1:0:0:1")},
		{name: "ok/an IPv4-mapped IPv6 address normalizes to IPv4", in: ipIdent("::ffff:192.0.2.1"), want: ipIdent("192.0.2.1")},

		{name: "fail/an empty name", in: dnsIdent(""), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a trailing dot", in: dnsIdent("example.com."), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an all-digit top-level label", in: dnsIdent("host.example.123"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an all-digit single label", in: dnsIdent("123"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a single label with an underscore", in: dnsIdent("my_nas"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a single label ending with a hyphen", in: dnsIdent("nas-"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IP address sent as a dns identifier", in: dnsIdent("192.0.2.1"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an empty label", in: dnsIdent("a..example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a leading dot", in: dnsIdent(".example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a label starting with a hyphen", in: dnsIdent("-a.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a label ending with a hyphen", in: dnsIdent("a-.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an underscore", in: dnsIdent("a_b.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a space", in: dnsIdent("a b.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a 64-octet label", in: dnsIdent(label(64) + ".example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a 254-octet name", in: dnsIdent(nameOf(254)), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a U-label (clients must send A-labels)", in: dnsIdent("bücher.example"), wantType: acme.ErrorRejectedIdentifier},
		// U+212A KELVIN SIGN lower-cases to an ASCII "k": the client sent a
		// name that is not LDH, and it must not be rewritten into one.
		{name: "fail/a non-ASCII letter that lower-cases to ASCII", in: dnsIdent("\u212Aelvin.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an A-label that is not valid punycode", in: dnsIdent("xn--zz.example"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an A-label that decodes to a control character", in: dnsIdent("xn--a.example"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an A-label whose U-label is not valid IDNA", in: dnsIdent("xn--a-ecp.example"), wantType: acme.ErrorRejectedIdentifier},
		// RFC 5890 §2.3.1: "--" in the third and fourth positions marks a
		// reserved LDH label; only "xn--" ones (A-labels) may be used. The
		// BRs (§7.1.4.2.1, zlint e_dnsname_contains_prohibited_reserved_label)
		// forbid the rest in certificates.
		{name: "fail/a reserved LDH label that is not an A-label", in: dnsIdent("ab--cd.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a wildcard that is not the whole leftmost label", in: dnsIdent("a*.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a wildcard below the leftmost label", in: dnsIdent("a.*.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/two wildcards", in: dnsIdent("*.*.example.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a bare wildcard", in: dnsIdent("*"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a bare wildcard with its dot", in: dnsIdent("*."), wantType: acme.ErrorRejectedIdentifier},
		// NSS, rustls' webpki and Chromium match no wildcard over a single
		// label, and "*.com" would cover a top-level domain (RFC 6125 §7.2).
		{name: "fail/a wildcard over a top-level domain", in: dnsIdent("*.com"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/a wildcard over a single-label host name", in: dnsIdent("*.NAS"), wantType: acme.ErrorRejectedIdentifier},
		// RFC 1035 §2.3.4 as applied to certificate names (zlint
		// e_ext_san_dns_name_too_long): the wildcard name itself, "*."
		// included, must fit in 253 octets.
		{name: "fail/a wildcard whose full name is longer than 253 octets", in: dnsIdent("*." + nameOf(253)), wantType: acme.ErrorRejectedIdentifier},
		// An address validation never connects to can never be validated
		// (validate.NeverDialled); loopback can, for the host itself.
		{name: "ok/a loopback address is kept", in: ipIdent("127.0.0.1"), want: ipIdent("127.0.0.1")},
		{name: "fail/the unspecified IPv4 address", in: ipIdent("0.0.0.0"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an address in 0.0.0.0/8", in: ipIdent("0.1.2.3"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/the unspecified IPv6 address", in: ipIdent("::"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IPv4 link-local address", in: ipIdent("169.254.169.254"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IPv4-mapped link-local address", in: ipIdent("::ffff:169.254.169.254"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IPv6 link-local address", in: ipIdent("fe80::1"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IPv4 multicast address", in: ipIdent("224.0.0.1"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IPv6 multicast address", in: ipIdent("ff02::1"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/the limited broadcast address", in: ipIdent("255.255.255.255"), wantType: acme.ErrorRejectedIdentifier},
		{name: "fail/an IPv6 address with a zone", in: ipIdent("fe80::1%eth0"), wantType: acme.ErrorMalformed},
		{name: "fail/an IPv4 address with leading zeros", in: ipIdent("192.000.002.001"), wantType: acme.ErrorMalformed},
		{name: "fail/an address range", in: ipIdent("192.0.2.0/24"), wantType: acme.ErrorMalformed},
		{name: "fail/a name sent as an ip identifier", in: ipIdent("example.com"), wantType: acme.ErrorMalformed},
		{name: "fail/an unknown identifier type", in: acme.Identifier{Type: "email", Value: "a@example.com"}, wantType: acme.ErrorUnsupportedIdentifier},
		{name: "fail/identifier types are case-sensitive", in: acme.Identifier{Type: "DNS", Value: "example.com"}, wantType: acme.ErrorUnsupportedIdentifier},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, wildcard, prob := normalizeIdentifier(tc.in)
			if tc.wantType == "" {
				if prob != nil {
					t.Fatalf("normalizeIdentifier(%s %+q) refused it: %s", tc.in.Type, tc.in.Value, prob)
				}
				if got != tc.want || wildcard != tc.wantWildcard {
					t.Fatalf("normalizeIdentifier(%s %+q) = %q wildcard=%v, want %q wildcard=%v", tc.in.Type, tc.in.Value, got.Value, wildcard, tc.want.Value, tc.wantWildcard)
				}
				again, _, prob := normalizeIdentifier(got)
				if prob != nil || again != got {
					t.Errorf("normalizing %+v again gives %+v, %v: not idempotent", got, again, prob)
				}
				return
			}
			if prob == nil {
				t.Fatalf("normalizeIdentifier(%s %+q) accepted it as %q, want %s", tc.in.Type, tc.in.Value, got.Value, tc.wantType)
			}
			if prob.Type != tc.wantType {
				t.Errorf("problem type %s, want %s (%s)", prob.Type, tc.wantType, prob.Detail)
			}
			// RFC 8555 §6.7.1: a subproblem names its identifier as sent.
			if prob.Identifier == nil || prob.Identifier.Type != tc.in.Type || prob.Identifier.Value != tc.in.Value {
				t.Errorf("subproblem identifier %+v, want %+v", prob.Identifier, tc.in)
			}
		})
	}
}

func TestPolicyAllowsAndDeniesByExactNameSuffixAndIPRange(t *testing.T) {
	type verdict struct {
		id      acme.Identifier
		allowed bool
	}
	yes := func(id acme.Identifier) verdict { return verdict{id, true} }
	no := func(id acme.Identifier) verdict { return verdict{id, false} }
	tests := []struct {
		name        string
		allow, deny *IdentifierPolicy
		verdicts    []verdict
	}{
		{name: "no policy allows everything", verdicts: []verdict{
			yes(dnsIdent("a.example.com")), yes(dnsIdent("*.example.com")), yes(ipIdent("192.0.2.1")),
		}},
		{name: "an exact name allows that name only",
			allow: &IdentifierPolicy{Domains: []string{"host.example.com"}},
			verdicts: []verdict{
				yes(dnsIdent("host.example.com")), yes(dnsIdent("HOST.Example.com")),
				no(dnsIdent("a.host.example.com")), no(dnsIdent("example.com")), no(dnsIdent("*.host.example.com")),
				no(dnsIdent("*.example.com")), no(ipIdent("192.0.2.1")),
			}},
		{name: "*.suffix allows names strictly below it",
			allow: &IdentifierPolicy{Domains: []string{"*.example.com"}},
			verdicts: []verdict{
				yes(dnsIdent("a.example.com")), yes(dnsIdent("b.a.example.com")), yes(dnsIdent("*.example.com")), yes(dnsIdent("*.a.example.com")),
				no(dnsIdent("example.com")), no(dnsIdent("badexample.com")), no(dnsIdent("example.com.evil.net")), no(dnsIdent("*.com.evil")),
			}},
		{name: ".suffix allows the name and everything below it",
			allow: &IdentifierPolicy{Domains: []string{".example.com"}},
			verdicts: []verdict{
				yes(dnsIdent("example.com")), yes(dnsIdent("a.example.com")), yes(dnsIdent("b.a.example.com")), yes(dnsIdent("*.example.com")),
				no(dnsIdent("notexample.com")), no(dnsIdent("example.com.evil.net")),
			}},
		{name: "policy names match case-insensitively",
			allow: &IdentifierPolicy{Domains: []string{"Host.EXAMPLE.com", "*.Corp.Example", ".LAB.example"}},
			verdicts: []verdict{
				yes(dnsIdent("host.example.com")), yes(dnsIdent("a.corp.example")), yes(dnsIdent("lab.example")), yes(dnsIdent("X.Lab.Example")),
				no(dnsIdent("corp.example")),
			}},
		{name: "IP ranges allow the addresses inside them",
			allow: &IdentifierPolicy{IPRanges: []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "198.51.100.9/24"}},
			verdicts: []verdict{
				yes(ipIdent("10.1.2.3")), yes(ipIdent("192.0.2.7")), yes(ipIdent("2001:db8::1")), yes(ipIdent("2001:DB8:ffff::1")),
				yes(ipIdent("::ffff:10.1.2.3")), yes(ipIdent("198.51.100.200")),
				no(ipIdent("11.0.0.1")), no(ipIdent("192.0.2.8")), no(ipIdent("2001:db9::1")), no(dnsIdent("a.example.com")),
			}},
		{name: "deny wins over allow",
			allow: &IdentifierPolicy{Domains: []string{".example.com"}, IPRanges: []string{"10.0.0.0/8"}},
			deny:  &IdentifierPolicy{Domains: []string{"secret.example.com", "*.internal.example.com"}, IPRanges: []string{"10.0.0.0/24"}},
			verdicts: []verdict{
				yes(dnsIdent("a.example.com")), yes(dnsIdent("internal.example.com")), yes(ipIdent("10.1.0.1")),
				no(dnsIdent("secret.example.com")), no(dnsIdent("SECRET.example.com")), no(dnsIdent("x.internal.example.com")),
				no(dnsIdent("*.internal.example.com")), no(ipIdent("10.0.0.5")), no(ipIdent("::ffff:10.0.0.5")),
			}},
		{name: "a deny list alone refuses only what it names",
			deny: &IdentifierPolicy{Domains: []string{"evil.example"}, IPRanges: []string{"203.0.113.0/24"}},
			verdicts: []verdict{
				yes(dnsIdent("good.example")), yes(dnsIdent("a.evil.example")), yes(ipIdent("192.0.2.1")),
				no(dnsIdent("evil.example")), no(ipIdent("203.0.113.9")),
			}},
		// Single-label names are issued by default; a profile that must
		// not issue them names them in its deny policy.
		{name: "deny localhost refuses localhost and nothing else",
			deny: &IdentifierPolicy{Domains: []string{"LocalHost"}},
			verdicts: []verdict{
				no(dnsIdent("localhost")), no(dnsIdent("LOCALHOST")),
				yes(dnsIdent("nas")), yes(dnsIdent("app.localhost")), yes(dnsIdent("localhost.example.com")),
			}},
		{name: "deny .localhost refuses localhost and every name below it",
			deny: &IdentifierPolicy{Domains: []string{".localhost"}},
			verdicts: []verdict{
				no(dnsIdent("localhost")), no(dnsIdent("app.localhost")), no(dnsIdent("*.app.localhost")),
				yes(dnsIdent("nas")), yes(dnsIdent("localhost.example.com")),
			}},
		{name: "*.lan allows the names below a single-label suffix",
			allow: &IdentifierPolicy{Domains: []string{"*.lan"}},
			verdicts: []verdict{
				yes(dnsIdent("nas.lan")), yes(dnsIdent("*.home.lan")),
				no(dnsIdent("lan")), no(dnsIdent("nas")), no(dnsIdent("nas.lan.example.com")),
			}},
		// A certificate for "*.example.com" is valid for secret.example.com
		// (RFC 6125 §6.4.3), so issuing it would hand out a denied name.
		// Boulder refuses such wildcards the same way.
		{name: "a wildcard covering a denied name is denied",
			deny: &IdentifierPolicy{Domains: []string{"secret.example.com", ".private.example.net", "*.internal.example.org"}},
			verdicts: []verdict{
				no(dnsIdent("*.example.com")), no(dnsIdent("*.example.net")), no(dnsIdent("*.internal.example.org")),
				yes(dnsIdent("*.secret.example.com")), yes(dnsIdent("*.example.org")), yes(dnsIdent("*.other.example.com")),
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, pol := range []*IdentifierPolicy{tc.allow, tc.deny} {
				if err := pol.validate(); err != nil {
					t.Fatalf("test policy is invalid: %v", err)
				}
			}
			p := newPolicy(tc.allow, tc.deny)
			for _, v := range tc.verdicts {
				id, _, prob := normalizeIdentifier(v.id)
				if prob != nil {
					t.Fatalf("test identifier %+v does not normalize: %s", v.id, prob)
				}
				got := p.check(id)
				switch {
				case v.allowed && got != nil:
					t.Errorf("%s %q refused: %s", v.id.Type, v.id.Value, got.Detail)
				case !v.allowed && got == nil:
					t.Errorf("%s %q allowed, want refused", v.id.Type, v.id.Value)
				case got != nil:
					if got.Type != acme.ErrorRejectedIdentifier {
						t.Errorf("%s %q: problem type %s, want %s", v.id.Type, v.id.Value, got.Type, acme.ErrorRejectedIdentifier)
					}
					if got.Identifier == nil || got.Identifier.Value != id.Value || got.Identifier.Type != id.Type {
						t.Errorf("%s %q: subproblem names %+v, want %+v", v.id.Type, v.id.Value, got.Identifier, id)
					}
				}
			}
		})
	}
}
