package relay

import (
	"net/netip"
	"regexp"
	"strings"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// quotedName matches a name an upstream's detail quotes, as Go's %q does.
var quotedName = regexp.MustCompile(`"([^"\\]+)"`)

// limitsNames says whether an upstream's rate limit, as its problem's
// detail states it, counts this order's names rather than the account
// every order of the profile shares. Boulder (Let's Encrypt) words its
// per-name limits so: "too many certificates (50) already issued for
// \"example.com\" …" (the registered domain, or an IP range), "too many
// failed authorizations (5) for \"api.example.com\" …", "… for this
// exact set of identifiers …"; its account and IP limits quote no name.
// A limit that quotes a name this order does not hold is taken as the
// account's, as is every wording not recognised: pausing the profile
// for it is what the relay did before it told the two apart.
func limitsNames(detail string, ids []vocab.Identifier) bool {
	if strings.Contains(strings.ToLower(detail), "exact set of") {
		return true
	}
	for _, m := range quotedName.FindAllStringSubmatch(detail, -1) {
		for _, id := range ids {
			if counts(m[1], id) {
				return true
			}
		}
	}
	return false
}

// counts says whether a limit quoting name counts identifier id: the
// name itself, a domain above it, or an IP range holding it.
func counts(name string, id vocab.Identifier) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	switch id.Type {
	case vocab.IdentifierIP:
		addr, err := netip.ParseAddr(id.Value)
		if err != nil {
			return false
		}
		if p, err := netip.ParsePrefix(name); err == nil {
			return p.Contains(addr)
		}
		a, err := netip.ParseAddr(name)
		return err == nil && a == addr
	case vocab.IdentifierDNS:
		v := strings.TrimSuffix(strings.ToLower(id.Value), ".")
		return v == name || strings.HasSuffix(v, "."+name)
	}
	return false
}

// onNames is f for an order of identifiers ids: a rate limit on the
// order's own names fails the order (the client is told rateLimited)
// instead of pausing the profile, whose other names the limit does not
// count. Such limits last hours to days, longer than an order waits.
func (f failure) onNames(ids []vocab.Identifier) failure {
	if f.verdict == coolDown && limitsNames(f.limitDetail, ids) {
		f.verdict, f.refusal = giveUp, signer.KindRateLimited
	}
	return f
}
