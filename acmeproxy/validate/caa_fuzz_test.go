package validate

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzCAAValue feeds arbitrary issue values, as a zone owner (or a
// resolver on the path) may publish them, to the parser and the judge.
// Properties: no panic; a value that parses has only well-formed tags and
// values; a property that does not parse or whose issuer is not this CA
// never permits; the judge permits exactly when the property does (or
// when it is an issuewild, for a name that is not a wildcard).
func FuzzCAAValue(f *testing.F) {
	for _, s := range []string{
		"", ";", " ; ", caaIdentity, caaIdentity + ";", "  " + caaIdentity + "\t;foo=bar;baz=bar",
		caaIdentity + "; accounturi=" + caaAccounts + caaAccount,
		caaIdentity + "; accounturi=a; accounturi=b",
		caaIdentity + "; validationmethods=http-01,dns-01",
		caaIdentity + "; validationmethods=,",
		caaIdentity + "; a_b=1", caaIdentity + "; ab=1 2 3", caaIdentity + "; foo=a\u2615b",
		caaIdentity + "; 1=2; a-b=c", caaIdentity + "; foo=b1 baz=a", "other-ca.example; accounturi=x",
		"\x00;\xff=\x01", strings.Repeat(";a=b", 300),
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	c := &CAAChecker{identities: []string{caaIdentity}, accountURIPrefix: caaAccounts}
	f.Fuzz(func(t *testing.T, value string, wildcard bool) {
		issuer, params, err := parseCAAValue(value)
		if strings.Contains(issuer, ";") {
			t.Fatalf("issuer %q holds a ;", issuer)
		}
		if err == nil {
			for tag, vals := range params {
				if !validParamTag(tag) || tag != strings.ToLower(tag) {
					t.Fatalf("parsed tag %q is malformed", tag)
				}
				for _, v := range vals {
					for i := 0; i < len(v); i++ {
						if v[i] < 0x21 || v[i] > 0x7e || v[i] == ';' {
							t.Fatalf("parsed value %q of %s is malformed", v, tag)
						}
					}
				}
			}
		}
		ok, _ := c.permits(value, caaAccount, "http-01")
		if ok && (err != nil || !strings.EqualFold(issuer, caaIdentity)) {
			t.Fatalf("value %q permits issuance: issuer %q, parse error %v", value, issuer, err)
		}
		tag := "issue"
		if wildcard {
			tag = "issuewild"
		}
		rr := &dns.CAA{Hdr: dns.RR_Header{Name: "x.test."}, Tag: tag, Value: value}
		jerr := c.judge(&caaSet{name: "x.test.", records: []*dns.CAA{rr}}, "x.test", wildcard, caaAccount, "http-01")
		if (jerr == nil) != (ok || (tag == "issuewild" && !wildcard)) {
			t.Fatalf("judge = %v, permits = %v for %s %q", jerr, ok, tag, value)
		}
	})
}
