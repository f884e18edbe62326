package validate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// CAAConfig says how this server is named in CAA records (RFC 8659, with
// the RFC 8657 parameters).
type CAAConfig struct {
	// Identities are the issuer domain names (RFC 8659 §4.2) by which an
	// issue or issuewild property names this server. At least one.
	Identities []string
	// AccountURIPrefix, followed by an account's id, is the URI by which
	// an accounturi parameter (RFC 8657 §3) names an account of this
	// profile. Unset, a property with an accounturi parameter names no
	// account here, so it never permits issuance.
	AccountURIPrefix string
}

// CAAChecker checks an identifier's CAA records (RFC 8659) before this
// server issues for it, asking the DNS servers of its Validator. It is
// safe for concurrent use.
type CAAChecker struct {
	v                *Validator
	identities       []string // lower case, as configured
	accountURIPrefix string
}

// NewCAAChecker builds the CAA checker of a profile whose validator is v.
// An error names the field at fault.
func NewCAAChecker(v *Validator, cfg CAAConfig) (*CAAChecker, error) {
	if v == nil {
		return nil, errors.New("validate: a CAA checker needs a Validator")
	}
	if len(cfg.Identities) == 0 {
		return nil, errors.New("validate: CAAConfig.Identities: at least one issuer domain name is required")
	}
	c := &CAAChecker{v: v, accountURIPrefix: cfg.AccountURIPrefix}
	for i, id := range cfg.Identities {
		if err := CheckCAAIdentity(id); err != nil {
			return nil, fmt.Errorf("validate: CAAConfig.Identities[%d] %q: %w", i, id, err)
		}
		c.identities = append(c.identities, strings.ToLower(id))
	}
	if p := cfg.AccountURIPrefix; p != "" {
		if err := CheckAccountURIPrefix(p); err != nil {
			return nil, fmt.Errorf("validate: CAAConfig.AccountURIPrefix %q: %w", p, err)
		}
	}
	return c, nil
}

// CheckCAAIdentity checks an issuer domain name (RFC 8659 §4.2: labels
// of letters, digits and inner hyphens, separated by dots, no trailing
// dot). The error does not repeat the name.
func CheckCAAIdentity(s string) error {
	if s == "" || len(s) > 253 {
		return errors.New("an issuer domain name has 1 to 253 characters")
	}
	for l := range strings.SplitSeq(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return errors.New("not an issuer domain name (labels of letters, digits and inner hyphens, no trailing dot)")
		}
		for i := 0; i < len(l); i++ {
			if !isAlnum(l[i]) && l[i] != '-' {
				return errors.New("not an issuer domain name (labels of letters, digits and inner hyphens, no trailing dot)")
			}
		}
	}
	return nil
}

// CheckAccountURIPrefix checks the base of the account URIs an
// accounturi parameter is compared with: an absolute http(s) URL without
// user info, query or fragment, ending in "/" (the account id follows).
func CheckAccountURIPrefix(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("want an absolute https:// URL without user info, query or fragment")
	}
	if !strings.HasSuffix(s, "/") {
		return errors.New(`must end with "/": the account id is appended to it`)
	}
	return nil
}

// Identities are the issuer domain names the checker answers to.
func (c *CAAChecker) Identities() []string { return append([]string(nil), c.identities...) }

// CheckCAA says whether the CAA records of domain (a DNS name, without
// the "*." of a wildcard, which wildcard says) let this server issue for
// it to the account accountID, whose control of the name was proved by
// the challenge type method (RFC 8657 §4: "http-01", "dns-01", …).
//
// It finds the relevant RRset (RFC 8659 §3): the CAA records at domain,
// else at its parent, climbing to the closest name that has any; CNAMEs
// are followed. It answers like the challenge checks: nil when issuance is
// permitted (no CAA record anywhere, or one that names this server for
// this account and method); a "caa" problem when the records forbid it,
// naming where they were found and what they say; a "dns" problem when a
// lookup failed — SERVFAIL, a timeout — since a record hidden by the
// failure might forbid it (fail closed); any other error for a fault on
// this side (no resolver reachable, the caller's context ended).
func (c *CAAChecker) CheckCAA(ctx context.Context, domain string, wildcard bool, accountID, method string) error {
	if len(c.v.resolvers) == 0 {
		return c.v.resolversErr
	}
	if domain == "" || strings.HasPrefix(domain, "*.") {
		return fmt.Errorf("validate: CAA domain %q must be a name without a wildcard label", domain)
	}
	ident := domain
	if wildcard {
		ident = "*." + domain
	}
	tctx, cancel := c.v.withTimeout(ctx)
	defer cancel()
	set, err := c.relevantSet(tctx, ctx, dns.Fqdn(strings.ToLower(domain)))
	if err != nil || set == nil {
		return err
	}
	return c.judge(set, ident, wildcard, accountID, method)
}

// caaSet is a relevant RRset: the CAA records at a name, where they were
// found (the name asked, and the CNAME target they belong to, if any).
type caaSet struct {
	name, via string
	records   []*dns.CAA
}

// where names the set's place for a detail.
func (s *caaSet) where() string {
	return strings.TrimSuffix(s.name, ".") + via(s.via, s.name)
}

// relevantSet climbs from name towards the root (which is not asked) and
// returns the first non-empty CAA RRset, or nil when there is none.
// RFC 8659 §3 climbs the parents of the name itself, not of a CNAME's
// target. A failed lookup ends the climb with its error: the records it
// hid might have been the relevant ones.
func (c *CAAChecker) relevantSet(ctx, parent context.Context, name string) (*caaSet, error) {
	for ; name != "." && name != ""; name = parentName(name) {
		rrs, at, err := c.lookup(ctx, parent, name)
		if err != nil {
			return nil, err
		}
		if len(rrs) > 0 {
			return &caaSet{name: name, via: at, records: rrs}, nil
		}
	}
	return nil, nil
}

// parentName is fqdn without its first label ("." for a TLD).
func parentName(fqdn string) string {
	if i := strings.IndexByte(fqdn, '.'); i >= 0 && i < len(fqdn)-1 {
		return fqdn[i+1:]
	}
	return "."
}

// lookup asks for the CAA records at name, following CNAMEs, and returns
// them with the name they were found at. A name that does not exist has
// none (RFC 8659 §3: the RRset is empty).
func (c *CAAChecker) lookup(ctx, parent context.Context, name string) ([]*dns.CAA, string, error) {
	where := strings.TrimSuffix(name, ".")
	at := name
	for queries := 0; ; queries++ {
		r, err := c.v.query(ctx, at, dns.TypeCAA)
		if err != nil {
			return nil, at, c.failed(parent, where, err)
		}
		rrs, end := chaseCAA(r.Answer, at)
		switch r.Rcode {
		case dns.RcodeSuccess:
		case dns.RcodeNameError:
			return nil, end, nil
		default:
			return nil, end, problem.DNSF("querying CAA at %s%s: the DNS server answered %s; issuance is refused until the CAA records can be read",
				where, via(end, name), rcodeName(r.Rcode))
		}
		if len(rrs) > 0 || strings.EqualFold(end, at) {
			return rrs, end, nil
		}
		// The answer ends in a CNAME whose target it says nothing about:
		// ask about the target.
		if queries == maxCNAMEQueries {
			return nil, end, problem.DNSF("querying CAA at %s: more than %d CNAMEs to follow", where, maxCNAMEQueries)
		}
		at = end
	}
}

// chaseCAA follows the chain of CNAMEs from name through an answer
// section and returns the CAA records at its end and the name it ends at.
func chaseCAA(answer []dns.RR, name string) ([]*dns.CAA, string) {
	seen := map[string]bool{}
	for !seen[strings.ToLower(name)] {
		seen[strings.ToLower(name)] = true
		var rrs []*dns.CAA
		next := ""
		for _, rr := range answer {
			if !strings.EqualFold(rr.Header().Name, name) {
				continue
			}
			switch rr := rr.(type) {
			case *dns.CAA:
				rrs = append(rrs, rr)
			case *dns.CNAME:
				next = rr.Target
			}
		}
		if len(rrs) > 0 || next == "" {
			return rrs, name
		}
		name = next
	}
	return nil, name // a loop of CNAMEs
}

// failed sorts a failed CAA query as dnsFailed sorts a TXT one.
func (c *CAAChecker) failed(parent context.Context, where string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("validate: querying CAA at %s: %w", where, perr)
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return problem.DNSF("querying CAA at %s: the DNS query timed out; issuance is refused until the CAA records can be read", where)
	}
	return fmt.Errorf("validate: querying CAA at %s: no resolver answered: %w", where, err)
}

// knownCAATags are the property tags this server understands, in the
// sense of RFC 8659 §4.1's critical flag: issue and issuewild it obeys;
// iodef (RFC 8659 §4.4), issuemail (RFC 9495), issuevmc and the CA/B
// Forum's contactemail and contactphone it recognises and has no use for.
var knownCAATags = map[string]bool{
	"issue": true, "issuewild": true, "iodef": true, "issuemail": true,
	"issuevmc": true, "contactemail": true, "contactphone": true,
}

// caaCritical reports whether a record carries the issuer critical flag
// (RFC 8659 §4.1: bit 0, the value 128). The value 1 counts too: enough
// zones set it believing it to be that bit (RFC 6844's erratum 5065
// discussion; Boulder honours it likewise) that ignoring it would issue
// where the owner meant to stop us.
func caaCritical(rr *dns.CAA) bool { return rr.Flag&(128|1) != 0 }

// maxCAADetail bounds how many records a detail quotes.
const maxCAADetail = 4

// judge applies a relevant RRset to a request (RFC 8659 §4, RFC 8657).
func (c *CAAChecker) judge(set *caaSet, ident string, wildcard bool, accountID, method string) error {
	var issue, issuewild []*dns.CAA
	for _, rr := range set.records {
		tag := strings.ToLower(rr.Tag)
		switch {
		case tag == "issue":
			issue = append(issue, rr)
		case tag == "issuewild":
			issuewild = append(issuewild, rr)
		case !knownCAATags[tag] && caaCritical(rr):
			// RFC 8659 §4.1: a CA "MUST NOT issue" when a critical
			// property it does not understand is present.
			return problem.CAAF("the CAA records at %s forbid issuance for %s: the property %s is marked critical and this CA does not understand it",
				set.where(), ident, caaString(rr))
		}
	}
	// RFC 8659 §4.3: issuewild properties are ignored for a name that is
	// not a wildcard, and for a wildcard they take the place of the issue
	// properties when there is at least one.
	relevant := issue
	if wildcard && len(issuewild) > 0 {
		relevant = issuewild
	}
	if len(relevant) == 0 {
		return nil // the records say nothing about issuing this name
	}
	why, forbidAll := "", true
	for _, rr := range relevant {
		issuer, _, _ := parseCAAValue(rr.Value)
		forbidAll = forbidAll && issuer == ""
		ok, reason := c.permits(rr.Value, accountID, method)
		if ok {
			return nil
		}
		if why == "" {
			why = reason
		}
	}
	switch {
	case why != "":
	case forbidAll:
		why = "they allow no CA to issue"
	default:
		why = fmt.Sprintf("none of them names this CA (%s)", strings.Join(c.identities, ", "))
	}
	return problem.CAAF("the CAA records at %s forbid issuance for %s: %s: %s", set.where(), ident, why, caaList(relevant))
}

// permits reports whether one issue or issuewild value lets this server
// issue for accountID validated by method; when it names this server and
// still does not, reason says why.
func (c *CAAChecker) permits(value, accountID, method string) (bool, string) {
	issuer, params, err := parseCAAValue(value)
	if issuer == "" || !c.isIdentity(issuer) {
		return false, "" // ";" forbids every CA; another name, another CA
	}
	if err != nil {
		return false, "the record naming this CA is malformed (" + err.Error() + ")"
	}
	// RFC 8657 §3: an accounturi parameter limits the property to that
	// account; more than one makes it unsatisfiable.
	if uris := params["accounturi"]; len(uris) > 0 {
		if len(uris) > 1 {
			return false, "the record naming this CA has more than one accounturi"
		}
		if c.accountURIPrefix == "" || uris[0] != c.accountURIPrefix+accountID {
			return false, "the record naming this CA limits it to another account"
		}
	}
	// RFC 8657 §4: a validationmethods parameter limits the property to
	// the methods it lists. More than one such parameter is refused, as
	// for accounturi (RFC 8657 §5.8 warns of the ambiguity).
	if ms := params["validationmethods"]; len(ms) > 0 {
		if len(ms) > 1 {
			return false, "the record naming this CA has more than one validationmethods"
		}
		if !methodListed(ms[0], method) {
			return false, "the record naming this CA does not allow validation by " + method
		}
	}
	return true, ""
}

func (c *CAAChecker) isIdentity(issuer string) bool {
	for _, id := range c.identities {
		if strings.EqualFold(issuer, id) {
			return true
		}
	}
	return false
}

// methodListed reports whether a validationmethods value (RFC 8657 §4:
// labels of letters, digits and hyphens, separated by commas) lists
// method. A malformed value lists nothing.
func methodListed(value, method string) bool {
	found := false
	for m := range strings.SplitSeq(value, ",") {
		if m == "" {
			return false
		}
		for i := 0; i < len(m); i++ {
			if !isAlnum(m[i]) && m[i] != '-' {
				return false
			}
		}
		if m == method {
			found = true
		}
	}
	return found
}

// parseCAAValue splits an issue or issuewild value (RFC 8659 §4.2):
//
//	issue-value = *WSP [issuer-domain-name *WSP] [";" *WSP [parameters *WSP]]
//	parameters  = (parameter *WSP ";" *WSP parameters) / parameter
//	parameter   = tag *WSP "=" *WSP value
//	tag         = (ALPHA / DIGIT) *( *("-") (ALPHA / DIGIT))
//	value       = *(%x21-3A / %x3C-7E)
//
// It returns the issuer domain name ("" when there is none) and the
// parameters by lower-case tag; err says what is malformed, the issuer
// being returned anyway so that the caller can tell whose record it is.
func parseCAAValue(v string) (string, map[string][]string, error) {
	parts := strings.Split(v, ";")
	issuer := trimWSP(parts[0])
	params := map[string][]string{}
	rest := parts[1:]
	if len(rest) == 1 && trimWSP(rest[0]) == "" {
		return issuer, params, nil // "issuer;" with no parameters
	}
	for _, p := range rest {
		tag, val, ok := strings.Cut(p, "=")
		if !ok {
			return issuer, nil, fmt.Errorf("parameter %q is not tag=value", trimWSP(p))
		}
		tag, val = trimWSP(tag), trimWSP(val)
		if !validParamTag(tag) {
			return issuer, nil, fmt.Errorf("parameter tag %q is not letters, digits and inner hyphens", tag)
		}
		for i := 0; i < len(val); i++ {
			if b := val[i]; b < 0x21 || b > 0x7e {
				return issuer, nil, fmt.Errorf("parameter %s has a value with a space or a character outside printable ASCII", tag)
			}
		}
		params[strings.ToLower(tag)] = append(params[strings.ToLower(tag)], val)
	}
	return issuer, params, nil
}

func validParamTag(t string) bool {
	if t == "" || !isAlnum(t[0]) || !isAlnum(t[len(t)-1]) {
		return false
	}
	for i := 0; i < len(t); i++ {
		if !isAlnum(t[i]) && t[i] != '-' {
			return false
		}
	}
	return true
}

func trimWSP(s string) string { return strings.Trim(s, " \t") }

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// caaString is a record as a zone file writes its data: 0 issue "ca.example".
func caaString(rr *dns.CAA) string {
	v := rr.Value
	if len(v) > 255 {
		v = v[:255] + "…"
	}
	tag := rr.Tag
	for i := 0; i < len(tag); i++ {
		if !isAlnum(tag[i]) {
			tag = fmt.Sprintf("%q", tag) // a tag off the wire may hold anything
			break
		}
	}
	return fmt.Sprintf("%d %s %q", rr.Flag, tag, v)
}

// caaList quotes up to maxCAADetail records.
func caaList(rrs []*dns.CAA) string {
	var b strings.Builder
	for i, rr := range rrs {
		if i == maxCAADetail {
			fmt.Fprintf(&b, " and %d more", len(rrs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(caaString(rr))
	}
	return b.String()
}
