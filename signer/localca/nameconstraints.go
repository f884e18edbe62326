package localca

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// CheckIdentifier refuses at newOrder a name the issuing CA's name
// constraints (RFC 5280 §4.2.1.10) forbid: an enterprise's intermediate,
// imported from files, is often constrained to its own domains, and a
// leaf naming another would be issued, then rejected by every client that
// checks the constraints ("not authorized to sign for this name"), far
// from its cause. Refused here, the client learns it before proving
// anything. An issuer that cannot be read now is the finalize's to report.
func (s *Signer) CheckIdentifier(id acme.Identifier) error {
	iss, err := s.Issuer(context.Background())
	if err != nil {
		return nil
	}
	return nameConstraintsRefusal(iss.Chain, id)
}

// nameConstraintsRefusal returns a refusal of id when a certificate of
// chain (the issuing CA and those above it: the constraints of each apply
// to every certificate below) does not permit it or excludes it, with the
// matching rules of Go's verifier (crypto/x509): a DNS constraint matches
// the name and the names below it, one with a leading "." only the names
// below it, letters compared without case; an excluded constraint also
// covers a wildcard whose names include one it excludes; an address is
// permitted only by a range of its own family.
func nameConstraintsRefusal(chain []*x509.Certificate, id acme.Identifier) error {
	for _, ca := range chain {
		var permitted, excluded bool
		var what string
		switch id.Type {
		case acme.IdentifierDNS:
			name := strings.ToLower(id.Value)
			permitted = len(ca.PermittedDNSDomains) == 0 || slices.ContainsFunc(ca.PermittedDNSDomains, func(c string) bool { return dnsConstraintMatches(c, name, false) })
			excluded = slices.ContainsFunc(ca.ExcludedDNSDomains, func(c string) bool { return dnsConstraintMatches(c, name, true) })
			what = "DNS name " + id.Value
		case acme.IdentifierIP:
			ip := net.ParseIP(id.Value)
			if ip == nil {
				continue // the leaf refuses it
			}
			permitted = len(ca.PermittedIPRanges) == 0 || slices.ContainsFunc(ca.PermittedIPRanges, func(n *net.IPNet) bool { return ipConstraintMatches(n, ip) })
			excluded = slices.ContainsFunc(ca.ExcludedIPRanges, func(n *net.IPNet) bool { return ipConstraintMatches(n, ip) })
			what = "IP address " + id.Value
		default:
			continue
		}
		if !permitted || excluded {
			return &signer.Error{Kind: signer.KindRejectedIdentifier,
				Detail: fmt.Sprintf("the %s is outside the name constraints of the issuing CA %q; clients would reject a certificate for it", what, ca.Subject.CommonName)}
		}
	}
	return nil
}

// dnsConstraintMatches reports whether the DNS constraint c covers name
// (lower case). An empty constraint covers every name.
func dnsConstraintMatches(c, name string, excluded bool) bool {
	c = strings.ToLower(c)
	if c == "" {
		return true
	}
	if strings.HasPrefix(c, ".") {
		if strings.HasSuffix(name, c) && len(name) > len(c) {
			return true
		}
	} else if name == c || strings.HasSuffix(name, "."+c) {
		return true
	}
	// "*.example.com" names secret.example.com too, so an excluded
	// secret.example.com excludes it.
	if excluded && strings.HasPrefix(name, "*.") {
		if i := strings.IndexByte(c, '.'); i >= 0 && c[i:] == name[1:] {
			return true
		}
	}
	return false
}

// ipConstraintMatches reports whether the range n covers ip, of the
// same family only.
func ipConstraintMatches(n *net.IPNet, ip net.IP) bool {
	if v4 := ip.To4(); v4 != nil && len(n.IP) == net.IPv4len {
		return n.Contains(v4)
	}
	if ip.To4() == nil && len(n.IP) == net.IPv6len {
		return n.Contains(ip)
	}
	return false
}
