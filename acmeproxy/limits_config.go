package acmeproxy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// LimitsConfig is the JSON of a profile's limits block. A limit left out
// keeps its default (authority.DefaultLimits); {"off": true} disables it.
//
//	"limits": {
//		"accounts_per_ip":        {"count": 100, "period": "1h"},
//		"orders_per_account":     {"off": true},
//		"pending_authorizations": {"count": 1000},
//		"max_identifiers":        {"count": 100},
//		"overrides": [{"account": "<id>", "limit": "orders_per_account", "count": 5000}]
//	}
type LimitsConfig struct {
	// AccountsPerIP: new accounts per client address, an IPv6 one by its
	// /64.
	AccountsPerIP *LimitConfig `json:"accounts_per_ip,omitempty"`
	// OrdersPerAccount: new orders per account.
	OrdersPerAccount *LimitConfig `json:"orders_per_account,omitempty"`
	// PendingAuthorizations caps an account's pending authorizations
	// (a count, no period).
	PendingAuthorizations *LimitConfig `json:"pending_authorizations,omitempty"`
	// FailedValidations: failed validations per account and identifier;
	// over it, new orders for the identifier are refused.
	FailedValidations *LimitConfig `json:"failed_validations,omitempty"`
	// DuplicateCertificates: certificates issued per account for one
	// exact identifier set; over it, new orders for the set are refused.
	DuplicateCertificates *LimitConfig `json:"duplicate_certificates,omitempty"`
	// MaxIdentifiers caps the identifiers of one order (a count, no
	// period).
	MaxIdentifiers *LimitConfig `json:"max_identifiers,omitempty"`
	// Overrides replace one limit for one account or for the accounts
	// bound with an EAB key of one label.
	Overrides []LimitOverrideConfig `json:"overrides,omitempty"`
}

// LimitConfig is one limit: count per period for a rate, count alone for
// a cap, or off.
type LimitConfig struct {
	Count  int      `json:"count,omitempty"`
	Period Duration `json:"period,omitempty"`
	Off    bool     `json:"off,omitempty"`
}

// LimitOverrideConfig replaces one limit for the account Account or for
// the accounts bound with an EAB key labelled EABLabel (exactly one). An
// override of a rate without a period keeps the profile's period.
type LimitOverrideConfig struct {
	Account  string `json:"account,omitempty"`
	EABLabel string `json:"eab_label,omitempty"`
	Limit    string `json:"limit"`
	LimitConfig
}

// limitConfigs is every limit of c by name (nil when left out).
func (c *LimitsConfig) limitConfigs() map[string]*LimitConfig {
	return map[string]*LimitConfig{
		authority.LimitAccountsPerIP: c.AccountsPerIP, authority.LimitOrdersPerAccount: c.OrdersPerAccount,
		authority.LimitPendingAuthorizations: c.PendingAuthorizations, authority.LimitFailedValidations: c.FailedValidations,
		authority.LimitDuplicateCertificates: c.DuplicateCertificates, authority.LimitMaxIdentifiers: c.MaxIdentifiers,
	}
}

// maxLimitCount bounds a count, so that period / count stays a usable
// emission interval.
const maxLimitCount = 1_000_000_000

// maxLimitPeriod bounds a rate's period, as the days a duration may say
// (parseDuration): the store keeps a bucket's theoretical arrival time as
// Unix nanoseconds, now plus up to a period, and a period past the ~236
// years left before int64 nanoseconds run out (year 2262) would wrap it
// negative, every spend then allowed: the limit silently off.
const maxLimitPeriod = 100 * 365 * 24 * time.Hour

// isAccountID reports whether s has the form of an account id: letters,
// digits, - and _, at most 64 (the store's are 26 base32 characters).
func isAccountID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Validate checks the limits; each message names the key below limits.
func (c *LimitsConfig) Validate() error {
	if c == nil {
		return nil
	}
	for _, name := range authority.LimitNames {
		if err := c.limitConfigs()[name].validate(name, false); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	type subject struct{ who, limit string }
	seen := map[subject]bool{}
	for i, o := range c.Overrides {
		key := fmt.Sprintf("overrides[%d]", i)
		switch {
		case (o.Account == "") == (o.EABLabel == ""):
			return fmt.Errorf("%s: names exactly one of account or eab_label", key)
		case !slices.Contains(authority.LimitNames, o.Limit):
			return fmt.Errorf("%s.limit: unknown limit %q (want one of %s)", key, o.Limit, strings.Join(authority.LimitNames, ", "))
		case o.Limit == authority.LimitAccountsPerIP && o.Account != "":
			return fmt.Errorf("%s: accounts_per_ip counts registrations before an account exists; override it for an eab_label", key)
		case o.Account != "" && !isAccountID(o.Account):
			// An id no account has (a pasted URL, a typo) would never match.
			return fmt.Errorf("%s.account: %q is not an account id (the last segment of the account's URL, as caddy acme-proxy accounts lists it)", key, o.Account)
		}
		who := "account " + o.Account
		if o.EABLabel != "" {
			who = "eab:" + o.EABLabel
		}
		if seen[subject{who, o.Limit}] {
			return fmt.Errorf("%s: %s overrides %s twice", key, who, o.Limit)
		}
		seen[subject{who, o.Limit}] = true
		if err := o.LimitConfig.validate(o.Limit, true); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	// An override without a period takes the one it inherits (Resolve),
	// known only now: its count must still leave a millisecond a unit.
	for i, o := range c.Resolve().Overrides {
		if r := o.Rate; !r.Off() && r.Period != 0 && r.Period/time.Duration(r.Count) < time.Millisecond {
			return fmt.Errorf("overrides[%d].count: %d per %s (the period it inherits) is more than one a millisecond", i, r.Count, r.Period)
		}
	}
	return nil
}

// validate checks one limit named name; an override may leave a rate's
// period out.
func (l *LimitConfig) validate(name string, override bool) error {
	if l == nil {
		return nil
	}
	isCap := authority.IsCapLimit(name)
	switch {
	case l.Off && (l.Count != 0 || l.Period != 0):
		return fmt.Errorf("off takes no count or period")
	case l.Off:
		return nil
	case l.Count < 1 || l.Count > maxLimitCount:
		return fmt.Errorf("count: %d must be between 1 and %d (or the limit off)", l.Count, maxLimitCount)
	case name == authority.LimitMaxIdentifiers && l.Count > maxIdentifiers:
		return fmt.Errorf("count: %d is over the %d identifiers an order can hold", l.Count, maxIdentifiers)
	case isCap && l.Period != 0:
		return fmt.Errorf("period: %s is a cap, a count without a period", name)
	case l.Period < 0:
		return fmt.Errorf("period: must be positive, not %s", time.Duration(l.Period))
	case time.Duration(l.Period) > maxLimitPeriod:
		return fmt.Errorf("period: %s is longer than %dd (100 years), the longest a limit's period may be", time.Duration(l.Period), maxLimitPeriod/(24*time.Hour))
	case !isCap && l.Period == 0 && !override:
		return fmt.Errorf("period: required (a rate is a count per period)")
	case !isCap && l.Period != 0 && time.Duration(l.Period)/time.Duration(l.Count) < time.Millisecond:
		return fmt.Errorf("period: %d per %s is more than one a millisecond", l.Count, time.Duration(l.Period))
	}
	return nil
}

// rate is l as the authority takes it, base for what l leaves out.
func (l *LimitConfig) rate(base authority.Rate) authority.Rate {
	switch {
	case l == nil:
		return base
	case l.Off:
		return authority.Rate{}
	}
	r := authority.Rate{Count: l.Count, Period: time.Duration(l.Period)}
	if r.Period == 0 {
		r.Period = base.Period
	}
	return r
}

// Resolve is the limits as the authority takes them (validated): the
// defaults, with what c sets.
func (c *LimitsConfig) Resolve() authority.Limits {
	d := authority.DefaultLimits()
	if c == nil {
		return d
	}
	out := authority.Limits{
		AccountsPerIP:         c.AccountsPerIP.rate(d.AccountsPerIP),
		OrdersPerAccount:      c.OrdersPerAccount.rate(d.OrdersPerAccount),
		PendingAuthorizations: c.PendingAuthorizations.rate(d.PendingAuthorizations),
		FailedValidations:     c.FailedValidations.rate(d.FailedValidations),
		DuplicateCertificates: c.DuplicateCertificates.rate(d.DuplicateCertificates),
		MaxIdentifiers:        c.MaxIdentifiers.rate(d.MaxIdentifiers),
	}
	for _, o := range c.Overrides {
		// An override without a period keeps the profile's, or the
		// default's when the profile has the limit off.
		base := out.Limit(o.Limit)
		if base.Off() {
			base = d.Limit(o.Limit)
		}
		out.Overrides = append(out.Overrides, authority.LimitOverride{
			Account: o.Account, EABLabel: o.EABLabel, Limit: o.Limit, Rate: o.LimitConfig.rate(base)})
	}
	return out
}
