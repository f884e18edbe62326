package acmeproxy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

func profileWithLimits(t *testing.T, limits string) ProfileConfig {
	t.Helper()
	var c ProfileConfig
	if err := json.Unmarshal([]byte(`{"profile": "p", "limits": `+limits+`}`), &c); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	c.SetDefaults()
	return c
}

func TestBadLimitsInJSONFailAtLoadNamingTheKey(t *testing.T) {
	tests := []struct{ name, limits, want string }{
		{"a rate without a period", `{"orders_per_account": {"count": 5}}`, "limits.orders_per_account: period: required"},
		{"a zero count", `{"accounts_per_ip": {"count": 0, "period": "1h"}}`, "limits.accounts_per_ip: count: 0 must be between 1"},
		{"a negative count", `{"failed_validations": {"count": -3, "period": "1h"}}`, "limits.failed_validations: count: -3 must be between 1"},
		{"a negative period", `{"duplicate_certificates": {"count": 5, "period": "-1h"}}`, "limits.duplicate_certificates: period: must be positive"},
		{"off with a count", `{"orders_per_account": {"off": true, "count": 5}}`, "limits.orders_per_account: off takes no count or period"},
		{"a cap with a period", `{"pending_authorizations": {"count": 5, "period": "1h"}}`, "limits.pending_authorizations: period: pending_authorizations is a cap"},
		{"max identifiers past an order's bound", `{"max_identifiers": {"count": 1001}}`, "limits.max_identifiers: count: 1001 is over the 1000"},
		{"a rate faster than one a millisecond", `{"orders_per_account": {"count": 10, "period": "5ms"}}`, "limits.orders_per_account: period: 10 per 5ms"},
		{"a period past int64 nanoseconds from now", `{"accounts_per_ip": {"count": 1, "period": "2200000h"}}`,
			"limits.accounts_per_ip: period: 2200000h0m0s is longer than 36500d"},
		{"a period of nanoseconds past a century", `{"orders_per_account": {"count": 1, "period": 9223372036854775807}}`,
			"limits.orders_per_account: period: 2562047h47m16.854775807s is longer than 36500d"},
		{"an override's period past a century", `{"overrides": [{"eab_label": "f", "limit": "failed_validations", "count": 5, "period": "876001h"}]}`,
			"limits.overrides[0]: period: 876001h0m0s is longer than 36500d"},
		{"an override of no one", `{"overrides": [{"limit": "orders_per_account", "count": 5}]}`, "limits.overrides[0]: names exactly one of account or eab_label"},
		{"an override of two subjects", `{"overrides": [{"account": "a", "eab_label": "b", "limit": "orders_per_account", "count": 5}]}`, "limits.overrides[0]: names exactly one"},
		{"an override of an unknown limit", `{"overrides": [{"account": "a", "limit": "orders", "count": 5}]}`, `limits.overrides[0].limit: unknown limit "orders"`},
		{"an override of accounts_per_ip by account", `{"overrides": [{"account": "a", "limit": "accounts_per_ip", "count": 5}]}`, "limits.overrides[0]: accounts_per_ip counts registrations"},
		{"an override of an account by its URL", `{"overrides": [{"account": "https://ca.example/acme/p/account/abc", "limit": "orders_per_account", "count": 5}]}`,
			`limits.overrides[0].account: "https://ca.example/acme/p/account/abc" is not an account id`},
		{"an override of an account id with a space", `{"overrides": [{"account": "not an id!", "limit": "orders_per_account", "count": 5}]}`,
			`limits.overrides[0].account: "not an id!" is not an account id`},
		{"an override with a zero count", `{"overrides": [{"eab_label": "f", "limit": "orders_per_account"}]}`, "limits.overrides[0]: count: 0 must be between 1"},
		{"an override without a period faster than one a millisecond in the period it inherits",
			`{"orders_per_account": {"count": 10, "period": "1s"}, "overrides": [{"eab_label": "f", "limit": "orders_per_account", "count": 5000}]}`,
			"limits.overrides[0].count: 5000 per 1s (the period it inherits) is more than one a millisecond"},
		{"an override twice", `{"overrides": [{"eab_label": "f", "limit": "max_identifiers", "count": 5}, {"eab_label": "f", "limit": "max_identifiers", "count": 6}]}`,
			"limits.overrides[1]: eab:f overrides max_identifiers twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := profileWithLimits(t, tc.limits)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestALimitsBlockReplacesOnlyTheDefaultsItNames(t *testing.T) {
	c := profileWithLimits(t, `{
		"accounts_per_ip": {"count": 20, "period": "1h0m0s"},
		"orders_per_account": {"off": true},
		"max_identifiers": {"count": 10},
		"overrides": [
			{"eab_label": "fleet", "limit": "orders_per_account", "count": 5000},
			{"eab_label": "fleet", "limit": "failed_validations", "count": 7},
			{"account": "acct", "limit": "max_identifiers", "count": 300}
		]}`)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := authority.DefaultLimits()
	want := authority.Limits{
		AccountsPerIP:         authority.Rate{Count: 20, Period: time.Hour},
		PendingAuthorizations: d.PendingAuthorizations,
		FailedValidations:     d.FailedValidations,
		DuplicateCertificates: d.DuplicateCertificates,
		MaxIdentifiers:        authority.Rate{Count: 10},
		Overrides: []authority.LimitOverride{
			// Without a period, an override keeps the profile's, or the
			// default's when the profile has the limit off.
			{EABLabel: "fleet", Limit: "orders_per_account", Rate: authority.Rate{Count: 5000, Period: d.OrdersPerAccount.Period}},
			{EABLabel: "fleet", Limit: "failed_validations", Rate: authority.Rate{Count: 7, Period: d.FailedValidations.Period}},
			{Account: "acct", Limit: "max_identifiers", Rate: authority.Rate{Count: 300}},
		},
	}
	if got := c.Limits.Resolve(); !reflect.DeepEqual(got, want) {
		t.Fatalf("resolved\n%+v\nwant\n%+v", got, want)
	}
	var none *LimitsConfig
	if got := none.Resolve(); !reflect.DeepEqual(got, d) {
		t.Fatalf("no limits block resolves to %+v; want the defaults %+v", got, d)
	}
	// The JSON round-trips: what the Caddyfile adapter writes loads back.
	b, err := json.Marshal(c.Limits)
	if err != nil {
		t.Fatal(err)
	}
	var back LimitsConfig
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Resolve(), want) {
		t.Fatalf("round trip through %s: %+v (%v)", b, back.Resolve(), err)
	}
}

// A period of a century, the longest, loads: the bound refuses only what
// the store's bucket arithmetic cannot hold.
func TestALimitsPeriodOfACenturyLoads(t *testing.T) {
	c := profileWithLimits(t, `{"duplicate_certificates": {"count": 1, "period": "36500d"}}`)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.Limits.Resolve().DuplicateCertificates; got != (authority.Rate{Count: 1, Period: 36500 * 24 * time.Hour}) {
		t.Errorf("resolved %v; want 1 per 36500d", got)
	}
}
