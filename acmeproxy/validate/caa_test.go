package validate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// The CAA identity and account URIs of the checker under test.
const (
	caaZone      = "caa.test"
	caaIdentity  = "ca.internal.example"
	caaAccounts  = "https://ca.internal.example/acme/internal/account/"
	caaAccount   = "acct123"
	caaOtherAcct = "https://ca.internal.example/acme/internal/account/acct321"
)

// startCAAZone serves the zone of the CAA behaviour table: one subtree
// per row (the apex has no CAA record, so a climb that reaches it finds
// nothing).
func startCAAZone(t *testing.T) *testdns.Server {
	t.Helper()
	d, err := testdns.Start(caaZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	add := func(name string, flag uint8, tag, value string) { d.AddCAA(name+"."+caaZone, flag, tag, value) }
	add("match", 0, "issue", caaIdentity)
	add("upper", 0, "issue", strings.ToUpper(caaIdentity))
	add("other", 0, "issue", "other-ca.example")
	add("mixedcase", 0, "iSsUe", "other-ca.example")
	add("several", 0, "issue", "other-ca.example")
	add("several", 0, "issue", caaIdentity)
	add("deny", 0, "issue", ";")
	add("wild-deny", 0, "issuewild", ";")
	add("wild-override-deny", 0, "issue", caaIdentity)
	add("wild-override-deny", 0, "issuewild", "other-ca.example")
	add("wild-override-ok", 0, "issue", "other-ca.example")
	add("wild-override-ok", 0, "issuewild", caaIdentity)
	add("wild-several", 0, "issuewild", "other-ca.example")
	add("wild-several", 0, "issuewild", caaIdentity)
	add("crit-unknown", 128, "tbs", "unknown")
	add("crit-unknown-1", 1, "tbs", "unknown")
	add("crit-odd-tag", 128, "t-b", "unknown")
	add("noncrit-unknown", 0x7e, "tbs", "unknown")
	add("crit-issue", 128, "issue", caaIdentity)
	add("crit-iodef", 128, "iodef", "mailto:caa@caa.test")
	add("crit-iodef", 0, "issue", caaIdentity)
	add("params", 0, "issue", "  "+caaIdentity+"  ;foo=bar; baz = qux")
	add("bad-tag", 0, "issue", caaIdentity+"; a_b=123")
	add("bad-value", 0, "issue", caaIdentity+"; ab=1 2 3")
	add("acct-match", 0, "issue", caaIdentity+"; accounturi="+caaAccounts+caaAccount)
	add("acct-mismatch", 0, "issue", caaIdentity+"; accounturi="+caaOtherAcct)
	add("acct-several", 0, "issue", caaIdentity+"; accounturi="+caaOtherAcct)
	add("acct-several", 0, "issue", caaIdentity+"; accounturi="+caaAccounts+caaAccount)
	add("acct-twice", 0, "issue", caaIdentity+"; accounturi="+caaAccounts+caaAccount+"; accounturi="+caaAccounts+caaAccount)
	add("dns-only", 0, "issue", caaIdentity+"; validationmethods=dns-01")
	add("http-only", 0, "issue", caaIdentity+"; validationmethods=http-01")
	add("http-or-dns", 0, "issue", caaIdentity+"; validationmethods=http-01,dns-01")
	add("bad-methods", 0, "issue", caaIdentity+"; validationmethods=http-01,dns_01")
	add("empty-method", 0, "issue", caaIdentity+"; validationmethods=http-01,,dns-01")
	add("acct-http", 0, "issue", caaIdentity+"; accounturi="+caaAccounts+caaAccount+"; validationmethods=http-01")
	add("acct-dns", 0, "issue", caaIdentity+"; accounturi="+caaAccounts+caaAccount+"; validationmethods=dns-01")
	add("wrong-acct-http", 0, "issue", caaIdentity+"; accounturi="+caaOtherAcct+"; validationmethods=http-01")
	// A SERVFAIL below a name that has records, and one above.
	add("present.servfail", 0, "issue", caaIdentity)
	d.SetRcode("servfail."+caaZone, dns.RcodeServerFailure)
	d.SetRcode("gone.servfail."+caaZone, dns.RcodeServerFailure)
	d.SetRcode("refused."+caaZone, dns.RcodeRefused)
	// CNAMEs: to a name whose CAA records forbid us, to one that names
	// us, and out of the zone (the records of the target's parents do not
	// count: the climb goes on from the alias's parent).
	add("pinned-other.cname", 0, "issue", "other-ca.example")
	add("pinned-us.cname", 0, "issue", caaIdentity)
	d.SetCNAME("to-other.cname."+caaZone, "pinned-other.cname."+caaZone)
	d.SetCNAME("to-us.cname."+caaZone, "pinned-us.cname."+caaZone)
	add("outside", 0, "issue", ";")
	d.SetCNAME("alias.outside."+caaZone, "host.elsewhere.test")
	return d
}

func newCAAChecker(t *testing.T, resolver, prefix string) *CAAChecker {
	t.Helper()
	v, err := New(Config{Resolvers: []string{resolver}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCAAChecker(v, CAAConfig{Identities: []string{"other-identity.example", caaIdentity}, AccountURIPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The behaviour table of CAA checking (RFC 8659, RFC 8657), the rows of
// Boulder's that apply here: every row names what an operator's records
// say and what the checker must answer, "ok" (issue), a caa problem or a
// dns problem; a refusal's detail names where the records were found and
// quotes the record that decided.
func TestCAARecordsDecideWhetherThisCAMayIssue(t *testing.T) {
	d := startCAAZone(t)
	c := newCAAChecker(t, d.Addr, caaAccounts)
	tests := []struct {
		name     string
		domain   string // below caaZone; "*." for a wildcard
		method   string // default http-01
		account  string // default caaAccount
		want     acme.ProblemType
		foundAt  string // below caaZone: the detail names it
		inDetail string // the detail quotes it
	}{
		{name: "ok/no record anywhere", domain: "absent"},
		{name: "ok/no record anywhere, wildcard", domain: "*.absent"},
		{name: "ok/issue names this CA", domain: "match"},
		{name: "ok/issue names this CA in upper case", domain: "upper"},
		{name: "ok/issue on the parent names this CA", domain: "child.match"},
		{name: "ok/issue on a grandparent names this CA", domain: "a.b.match"},
		{name: "ok/one of several issue records names this CA", domain: "several"},
		{name: "ok/critical issue naming this CA", domain: "crit-issue"},
		{name: "ok/critical iodef is understood", domain: "crit-iodef"},
		{name: "ok/unknown property not critical", domain: "noncrit-unknown"},
		{name: "ok/unknown property not critical, wildcard", domain: "*.noncrit-unknown"},
		{name: "ok/issue with unknown parameters", domain: "params"},
		{name: "ok/issuewild only, name not a wildcard", domain: "wild-deny"},
		{name: "ok/issuewild names this CA for a wildcard", domain: "*.wild-override-ok"},
		{name: "ok/one of several issuewild names this CA", domain: "*.wild-several"},
		{name: "ok/accounturi names this account", domain: "acct-match"},
		{name: "ok/one of several records names this account", domain: "acct-several"},
		{name: "ok/validationmethods lists the method", domain: "http-only"},
		{name: "ok/validationmethods lists the method among others", domain: "http-or-dns"},
		{name: "ok/validationmethods lists dns-01, validated by dns-01", domain: "dns-only", method: acme.ChallengeDNS01},
		{name: "ok/accounturi and validationmethods both match", domain: "acct-http"},
		{name: "ok/SERVFAIL above a name with records is never asked", domain: "present.servfail"},
		{name: "ok/CNAME to a name whose records name this CA", domain: "to-us.cname"},

		{name: "fail/issue names another CA", domain: "other", want: acme.ErrorCAA, foundAt: "other", inDetail: `0 issue "other-ca.example"`},
		{name: "fail/issue on the parent names another CA", domain: "www.other", want: acme.ErrorCAA, foundAt: "other", inDetail: `0 issue "other-ca.example"`},
		{name: "fail/mixed-case tag is still issue", domain: "mixedcase", want: acme.ErrorCAA, foundAt: "mixedcase", inDetail: `0 iSsUe "other-ca.example"`},
		{name: "fail/; forbids every CA", domain: "deny", want: acme.ErrorCAA, foundAt: "deny", inDetail: `0 issue ";"`},
		{name: "fail/; forbids a wildcard too", domain: "*.deny", want: acme.ErrorCAA, foundAt: "deny", inDetail: `0 issue ";"`},
		{name: "fail/issuewild ; for a wildcard", domain: "*.wild-deny", want: acme.ErrorCAA, foundAt: "wild-deny", inDetail: `0 issuewild ";"`},
		{name: "fail/issuewild overrides an issue naming this CA", domain: "*.wild-override-deny", want: acme.ErrorCAA, foundAt: "wild-override-deny", inDetail: `0 issuewild "other-ca.example"`},
		{name: "fail/unknown critical property", domain: "crit-unknown", want: acme.ErrorCAA, foundAt: "crit-unknown", inDetail: `128 tbs "unknown"`},
		{name: "fail/unknown critical property with a tag off any grammar, quoted", domain: "crit-odd-tag", want: acme.ErrorCAA, foundAt: "crit-odd-tag", inDetail: `128 "t-b" "unknown"`},
		{name: "fail/unknown property flagged 1", domain: "crit-unknown-1", want: acme.ErrorCAA, foundAt: "crit-unknown-1", inDetail: `1 tbs "unknown"`},
		{name: "fail/issue naming this CA with a malformed tag", domain: "bad-tag", want: acme.ErrorCAA, foundAt: "bad-tag", inDetail: "a_b=123"},
		{name: "fail/issue naming this CA with a malformed value", domain: "bad-value", want: acme.ErrorCAA, foundAt: "bad-value", inDetail: "ab=1 2 3"},
		{name: "fail/accounturi names another account", domain: "acct-mismatch", want: acme.ErrorCAA, foundAt: "acct-mismatch", inDetail: "accounturi=" + caaOtherAcct},
		{name: "fail/accounturi, request by another account", domain: "acct-match", account: "acct999", want: acme.ErrorCAA, foundAt: "acct-match", inDetail: "another account"},
		{name: "fail/two accounturi parameters are unsatisfiable", domain: "acct-twice", want: acme.ErrorCAA, foundAt: "acct-twice", inDetail: "more than one accounturi"},
		{name: "fail/validationmethods lists only dns-01", domain: "dns-only", want: acme.ErrorCAA, foundAt: "dns-only", inDetail: "validationmethods=dns-01"},
		{name: "fail/validationmethods malformed, even listing the method", domain: "bad-methods", want: acme.ErrorCAA, foundAt: "bad-methods", inDetail: "dns_01"},
		{name: "fail/validationmethods with an empty label", domain: "empty-method", want: acme.ErrorCAA, foundAt: "empty-method", inDetail: "http-01,,dns-01"},
		{name: "fail/accounturi matches, validationmethods does not", domain: "acct-dns", want: acme.ErrorCAA, foundAt: "acct-dns", inDetail: "does not allow validation by http-01"},
		{name: "fail/validationmethods matches, accounturi does not", domain: "wrong-acct-http", want: acme.ErrorCAA, foundAt: "wrong-acct-http", inDetail: "another account"},
		{name: "fail/CNAME to a name whose records name another CA", domain: "to-other.cname", want: acme.ErrorCAA, foundAt: "to-other.cname", inDetail: "pinned-other.cname." + caaZone},
		{name: "fail/CNAME out of the zone, the alias's parent forbids", domain: "alias.outside", want: acme.ErrorCAA, foundAt: "outside", inDetail: `0 issue ";"`},

		{name: "fail/SERVFAIL at the name", domain: "servfail", want: acme.ErrorDNS, foundAt: "servfail", inDetail: "SERVFAIL"},
		{name: "fail/SERVFAIL on the way up", domain: "child.gone.servfail", want: acme.ErrorDNS, foundAt: "gone.servfail", inDetail: "SERVFAIL"},
		{name: "fail/REFUSED at the name", domain: "refused", want: acme.ErrorDNS, foundAt: "refused", inDetail: "REFUSED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, account := tt.method, tt.account
			if method == "" {
				method = acme.ChallengeHTTP01
			}
			if account == "" {
				account = caaAccount
			}
			domain, wildcard := strings.CutPrefix(tt.domain+"."+caaZone, "*.")
			err := c.CheckCAA(context.Background(), domain, wildcard, account, method)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckCAA(%s) = %v, want issuance permitted", tt.domain, err)
				}
				return
			}
			p, ok := problem.As(err)
			if !ok || p.Type != tt.want {
				t.Fatalf("CheckCAA(%s) = %v, want a %s problem", tt.domain, err, tt.want)
			}
			if at := tt.foundAt + "." + caaZone; !strings.Contains(p.Detail, " at "+at) {
				t.Errorf("detail %q does not say the records are at %s", p.Detail, at)
			}
			if !strings.Contains(p.Detail, tt.inDetail) {
				t.Errorf("detail %q does not quote %q", p.Detail, tt.inDetail)
			}
			if tt.want == acme.ErrorCAA && !strings.Contains(p.Detail, strings.TrimPrefix(tt.domain, "*.")) {
				t.Errorf("detail %q does not name the identifier %s", p.Detail, tt.domain)
			}
		})
	}
}

// An operator who leaves account_uri_prefix unset still gets a record
// pinned to an account honoured as a restriction: no account of this
// server can be proved to be the one it names, so it never permits.
func TestAnAccountURIRecordNeverPermitsWithoutAnAccountURIPrefix(t *testing.T) {
	d := startCAAZone(t)
	c := newCAAChecker(t, d.Addr, "")
	err := c.CheckCAA(context.Background(), "acct-match."+caaZone, false, caaAccount, acme.ChallengeHTTP01)
	if p, ok := problem.As(err); !ok || p.Type != acme.ErrorCAA {
		t.Fatalf("CheckCAA = %v, want a caa problem", err)
	}
	// A record without accounturi still permits.
	if err := c.CheckCAA(context.Background(), "match."+caaZone, false, caaAccount, acme.ChallengeHTTP01); err != nil {
		t.Fatalf("CheckCAA(match) = %v, want nil", err)
	}
}

// When no resolver answers at all, nothing is known about the records:
// the check fails closed with an error that is not the client's problem
// (the caller retries it), never with a permission.
func TestACAACheckWithNoResolverAnsweringIsAFaultNotAPermission(t *testing.T) {
	c := newCAAChecker(t, "127.0.0.1:1", caaAccounts)
	err := c.CheckCAA(context.Background(), "absent."+caaZone, false, caaAccount, acme.ChallengeHTTP01)
	if err == nil {
		t.Fatal("CheckCAA with no resolver reachable permitted issuance")
	}
	if _, ok := problem.As(err); ok {
		t.Fatalf("CheckCAA = %v: a fault on our side reported as the client's problem", err)
	}
}

// The configuration a checker refuses, each error naming the field.
func TestNewCAACheckerRefusesABadConfiguration(t *testing.T) {
	v, err := New(Config{Resolvers: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  CAAConfig
		want string
	}{
		{"fail/no identity", CAAConfig{}, "Identities"},
		{"fail/identity with a trailing dot", CAAConfig{Identities: []string{"ca.example."}}, "Identities[0]"},
		{"fail/identity with a space", CAAConfig{Identities: []string{"ca.example", "ca example"}}, "Identities[1]"},
		{"fail/identity with a leading hyphen", CAAConfig{Identities: []string{"-ca.example"}}, "Identities[0]"},
		{"fail/prefix not a URL", CAAConfig{Identities: []string{"ca.example"}, AccountURIPrefix: "ca.example/account/"}, "AccountURIPrefix"},
		{"fail/prefix without a trailing slash", CAAConfig{Identities: []string{"ca.example"}, AccountURIPrefix: "https://ca.example/acme/p/account"}, "AccountURIPrefix"},
		{"fail/prefix with a query", CAAConfig{Identities: []string{"ca.example"}, AccountURIPrefix: "https://ca.example/?a=/"}, "AccountURIPrefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCAAChecker(v, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewCAAChecker(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
			}
		})
	}
	if _, err := NewCAAChecker(v, CAAConfig{Identities: []string{"ca.example", "CA-2.example"}, AccountURIPrefix: "https://ca.example/acme/p/account/"}); err != nil {
		t.Fatalf("a sound configuration refused: %v", err)
	}
}

// resolverWithoutChasing answers CAA queries as a resolver that does not
// follow CNAMEs would: the alias's answer is the CNAME alone, and the
// target's records come only when asked about the target.
type resolverWithoutChasing struct{}

func (resolverWithoutChasing) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	switch strings.ToLower(q.Name) {
	case "alias.example.":
		m.Answer = []dns.RR{cname(q.Name, "target.example.")}
	case "target.example.":
		m.Answer = []dns.RR{&dns.CAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCAA, Class: dns.ClassINET}, Tag: "issue", Value: "other-ca.example"}}
	case "example.":
	default:
		m.Rcode = dns.RcodeNameError
	}
	_ = w.WriteMsg(m)
}

// A CNAME whose target the resolver's answer says nothing about is
// followed by asking about the target: its records are the alias's
// (RFC 8659 §3), so they cannot be skipped by a resolver that does not
// chase.
func TestACNAMETheResolverDidNotFollowIsFollowedForCAA(t *testing.T) {
	c := newCAAChecker(t, startDNS(t, resolverWithoutChasing{}), caaAccounts)
	err := c.CheckCAA(context.Background(), "alias.example", false, caaAccount, acme.ChallengeHTTP01)
	p, ok := problem.As(err)
	if !ok || p.Type != acme.ErrorCAA {
		t.Fatalf("CheckCAA(alias.example) = %v, want a caa problem from the target's records", err)
	}
	if !strings.Contains(p.Detail, "alias.example (following a CNAME to target.example)") {
		t.Errorf("detail %q does not say the records were found through the CNAME", p.Detail)
	}
}

// A resolver that does not answer in time hides whatever records there
// are: the check fails closed with a dns problem naming the name, never
// permits.
func TestACAALookupThatTimesOutFailsClosedWithADNSProblem(t *testing.T) {
	v, err := New(Config{Resolvers: []string{silentResolver(t)}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCAAChecker(v, CAAConfig{Identities: []string{caaIdentity}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.CheckCAA(context.Background(), "slow.example", false, caaAccount, acme.ChallengeHTTP01)
	p, ok := problem.As(err)
	if !ok || p.Type != acme.ErrorDNS || !strings.Contains(p.Detail, "slow.example") || !strings.Contains(p.Detail, "timed out") {
		t.Fatalf("CheckCAA against a silent resolver = %v, want a dns problem saying the lookup of slow.example timed out", err)
	}
}
