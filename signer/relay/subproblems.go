package relay

import (
	"net/netip"
	"strings"

	"github.com/mholt/acmez/v3/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Bounds on the subproblems of an upstream's refusal that the client
// is shown, and that its order's error keeps: how many, and how long
// each one's detail. An upstream may send any number, of any length.
const (
	maxSubproblems      = 100
	maxSubproblemDetail = 256
)

// classifyFor is classify for an attempt at the order of identifiers
// ids: a rate limit on its own names fails it (onNames), and a refusal
// whose problem has subproblems (RFC 8555 §6.7.1) is the client's
// about the identifiers they name (forOrder).
func (r secrets) classifyFor(err error, last response, ids []vocab.Identifier) failure {
	return r.forOrder(r.classify(err, last).onNames(ids), ids)
}

// forOrder is f with the subproblems of its stated problem that name
// the order's identifiers ids, as the client hears them: each of a type
// refusalOf passes on, with the upstream's detail (no secret, no
// upstream URL, at most maxSubproblemDetail bytes), about the order's
// identifier as the order holds it; one naming no identifier of the
// order, or one of the relay's own business (unauthorized, tls…), is
// left out, as is any past the first maxSubproblems. A compound
// problem, whose type says nothing itself, is the refusal its
// subproblems are: of their kind when they agree (each caa: the order
// fails as caa), compound when they do not, and none (the generic
// failure) when none is the client's.
func (r secrets) forOrder(f failure, ids []vocab.Identifier) failure {
	if f.verdict != giveUp || f.stated == nil {
		return f
	}
	subs := r.subproblemsFor(f.stated.Subproblems, ids)
	if f.stated.Type == acme.ProblemTypeCompound {
		f.refusal = agreedKind(subs)
		f.refusalDetail = r.refusalDetail(f.refusal, nil, f.stated.Detail)
		if len(subs) == 1 && f.refusalDetail != "" {
			// About one name: as a validation failure of it reads.
			f.refusalDetail = r.refusalDetail(f.refusal, nameProblem{name: subs[0].Identifier.Value}, subs[0].Detail)
		}
	}
	if f.refusal != 0 {
		f.subproblems = subs
	}
	return f
}

// subproblemsFor is what of ups, the upstream's subproblems, the
// client of an order of identifiers ids is shown (forOrder): one per
// identifier and type.
func (r secrets) subproblemsFor(ups []acme.Subproblem, ids []vocab.Identifier) []signer.Subproblem {
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		if k := identifierKey(id.Type, id.Value); k != "" {
			index[k] = i
		}
	}
	type seenKey struct {
		id   int
		kind signer.Kind
	}
	seen := make(map[seenKey]bool)
	var out []signer.Subproblem
	for _, sp := range ups {
		if len(out) == maxSubproblems {
			break
		}
		kind := refusalOf(sp.Type)
		i, ok := index[identifierKey(sp.Identifier.Type, sp.Identifier.Value)]
		if kind == 0 || !ok || seen[seenKey{i, kind}] {
			continue
		}
		seen[seenKey{i, kind}] = true
		detail := r.clientText(sp.Detail)
		if detail == "" {
			detail = "no detail given"
		}
		out = append(out, signer.Subproblem{Kind: kind, Detail: textcut.Clip(detail, maxSubproblemDetail, "…"), Identifier: ids[i]})
	}
	return out
}

// identifierKey is an identifier as two spellings of it compare: a DNS
// name in lower case without a final dot, an IP address as Go writes
// it. "" for one that cannot be the order's.
func identifierKey(typ, value string) string {
	switch typ {
	case vocab.IdentifierDNS:
		return "dns:" + strings.TrimSuffix(strings.ToLower(value), ".")
	case vocab.IdentifierIP:
		if a, err := netip.ParseAddr(value); err == nil {
			return "ip:" + a.Unmap().String()
		}
	}
	return ""
}

// agreedKind is the refusal subs make together: their kind when they
// all have one, KindCompound when they differ, zero for none.
func agreedKind(subs []signer.Subproblem) signer.Kind {
	var k signer.Kind
	for _, sp := range subs {
		switch k {
		case 0:
			k = sp.Kind
		case sp.Kind:
		default:
			return signer.KindCompound
		}
	}
	return k
}
