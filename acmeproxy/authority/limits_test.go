package authority

import (
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

func TestAnAccountsOwnOverrideWinsOverItsLabelsAndTheProfiles(t *testing.T) {
	l := Limits{
		OrdersPerAccount: Rate{Count: 10, Period: time.Hour},
		Overrides: []LimitOverride{
			{EABLabel: "fleet", Limit: LimitOrdersPerAccount, Rate: Rate{Count: 100, Period: time.Hour}},
			{Account: "vip", Limit: LimitOrdersPerAccount, Rate: Rate{Count: 1000, Period: time.Hour}},
			{EABLabel: "fleet", Limit: LimitMaxIdentifiers, Rate: Rate{Count: 7}},
			{Account: "muted", Limit: LimitOrdersPerAccount},
		},
	}
	tests := []struct {
		name, account, label string
		limit                string
		want                 Rate
	}{
		{"an account without an override has the profile's", "a", "", LimitOrdersPerAccount, Rate{10, time.Hour}},
		{"an account bound with the label has the label's", "a", "fleet", LimitOrdersPerAccount, Rate{100, time.Hour}},
		{"the account's own override wins over its label's", "vip", "fleet", LimitOrdersPerAccount, Rate{1000, time.Hour}},
		{"an override of another limit leaves this one", "a", "", LimitMaxIdentifiers, Rate{}},
		{"a label's override of another limit", "a", "fleet", LimitMaxIdentifiers, Rate{Count: 7}},
		{"an override can turn a limit off", "muted", "fleet", LimitOrdersPerAccount, Rate{}},
		{"another label has the profile's", "a", "other", LimitOrdersPerAccount, Rate{10, time.Hour}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.For(tc.limit, tc.account, tc.label); got != tc.want {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
		})
	}
}

func TestAnIdentifierSetIsNamedTheSameWhateverItsOrder(t *testing.T) {
	dns := func(v ...string) []acme.Identifier {
		out := make([]acme.Identifier, len(v))
		for i, s := range v {
			out[i] = acme.Identifier{Type: acme.IdentifierDNS, Value: s}
		}
		return out
	}
	ab := identifierSetKey(dns("a.example", "b.example"))
	if got := identifierSetKey(dns("b.example", "a.example")); got != ab {
		t.Errorf("reordered set: %s; want %s", got, ab)
	}
	for _, other := range [][]acme.Identifier{dns("a.example"), dns("a.example", "b.example", "c.example"),
		{{Type: acme.IdentifierIP, Value: "a.example"}, {Type: acme.IdentifierDNS, Value: "b.example"}}} {
		if identifierSetKey(other) == ab {
			t.Errorf("%v is named as {a.example, b.example}", other)
		}
	}
}

// A one-name order spends from the same duplicate_certificates bucket
// whatever the name's case and however often the set names it: the
// single-identifier key is the set's key.
func TestAOneNameSetIsNamedAsTheSameNameRepeatedInAnyCase(t *testing.T) {
	dns := func(v ...string) []acme.Identifier {
		out := make([]acme.Identifier, len(v))
		for i, s := range v {
			out[i] = acme.Identifier{Type: acme.IdentifierDNS, Value: s}
		}
		return out
	}
	one := identifierSetKey(dns("A.Example"))
	for _, same := range [][]acme.Identifier{dns("a.example", "a.example"), dns("A.EXAMPLE", "a.example")} {
		if got := identifierSetKey(same); got != one {
			t.Errorf("%v: %s; want %s, the key of {a.example}", same, got, one)
		}
	}
	if identifierSetKey(dns("b.example")) == one {
		t.Errorf("{b.example} is named as {a.example}")
	}
}

// A bucket key names each part of the subject in order, so that one
// account's bucket is never another subject's.
func TestALimitKeyNamesTheLimitTheProfileAndEachPartOfTheSubject(t *testing.T) {
	au := &Authority{cfg: Config{Profile: "internal"}}
	tests := []struct {
		name    string
		subject []string
		want    string
	}{
		{"one part", []string{"acct"}, "orders_per_account/internal/acct"},
		{"two parts", []string{"acct", "dns:a.example"}, "orders_per_account/internal/acct/dns:a.example"},
		{"three parts", []string{"10.0.0.0/8", "eab:fleet", "x"}, "orders_per_account/internal/10.0.0.0/8/eab:fleet/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := au.limitKey(LimitOrdersPerAccount, tt.subject...); got != tt.want {
				t.Errorf("limitKey: %q; want %q", got, tt.want)
			}
		})
	}
}
