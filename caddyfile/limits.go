package caddyfile

import (
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// parseLimits reads a profile's limits block into cfg, checked as
// Provision checks it:
//
//	limits {
//		accounts_per_ip        <count> <period> | off
//		orders_per_account     <count> <period> | off
//		pending_authorizations <count> | off
//		failed_validations     <count> <period> | off
//		duplicate_certificates <count> <period> | off
//		max_identifiers        <count> | off
//		override <account id | eab:label> <limit> <count> [<period>] | off
//	}
//
// A limit the block leaves out keeps its default.
func parseLimits(d *caddyfile.Dispenser, cfg *acmeproxy.ProfileConfig) error {
	if d.NextArg() {
		return d.Errf("acme_proxy: limits: unexpected argument %q; limits go in a block", d.Val())
	}
	if cfg.Limits == nil {
		cfg.Limits = new(acmeproxy.LimitsConfig)
	}
	l := cfg.Limits
	fields := map[string]**acmeproxy.LimitConfig{
		authority.LimitAccountsPerIP: &l.AccountsPerIP, authority.LimitOrdersPerAccount: &l.OrdersPerAccount,
		authority.LimitPendingAuthorizations: &l.PendingAuthorizations, authority.LimitFailedValidations: &l.FailedValidations,
		authority.LimitDuplicateCertificates: &l.DuplicateCertificates, authority.LimitMaxIdentifiers: &l.MaxIdentifiers,
	}
	for n := d.Nesting(); d.NextBlock(n); {
		name := d.Val()
		key := "limits." + name
		if name == "override" {
			o, err := parseOverride(d)
			if err != nil {
				return err
			}
			l.Overrides = append(l.Overrides, o)
			continue
		}
		field, ok := fields[name]
		if !ok {
			return d.Errf("acme_proxy: limits: unknown limit %q (want %s or override)", name, strings.Join(authority.LimitNames, ", "))
		}
		if *field != nil {
			return d.Errf("acme_proxy: %s: set twice", key)
		}
		lc, err := limitArgs(d, key, name, d.RemainingArgs(), false)
		if err != nil {
			return err
		}
		*field = lc
	}
	if err := l.Validate(); err != nil {
		return d.Errf("acme_proxy: limits.%v", err)
	}
	return nil
}

// parseOverride reads `override <account id | eab:label> <limit> <count>
// [<period>]`, or `off` for the count.
func parseOverride(d *caddyfile.Dispenser) (acmeproxy.LimitOverrideConfig, error) {
	var o acmeproxy.LimitOverrideConfig
	args := d.RemainingArgs()
	if len(args) < 3 {
		return o, d.Errf("acme_proxy: limits.override: want <account id | eab:label> <limit> <count> [<period>], got %d values", len(args))
	}
	if label, ok := strings.CutPrefix(args[0], "eab:"); ok {
		if label == "" {
			return o, d.Err("acme_proxy: limits.override: eab: wants a label")
		}
		o.EABLabel = label
	} else {
		o.Account = args[0]
	}
	o.Limit = args[1]
	if !slices.Contains(authority.LimitNames, o.Limit) {
		return o, d.Errf("acme_proxy: limits.override: unknown limit %q (want one of %s)", o.Limit, strings.Join(authority.LimitNames, ", "))
	}
	lc, err := limitArgs(d, "limits.override "+args[0]+" "+o.Limit, o.Limit, args[2:], true)
	if err != nil {
		return o, err
	}
	o.LimitConfig = *lc
	return o, nil
}

// limitArgs reads a limit's values: `off`, `<count>` for a cap, or
// `<count> <period>` for a rate (an override may leave the period out).
func limitArgs(d *caddyfile.Dispenser, key, name string, args []string, override bool) (*acmeproxy.LimitConfig, error) {
	isCap := authority.IsCapLimit(name)
	want := "<count> <period> or off"
	if isCap {
		want = "<count> or off"
	}
	switch {
	case len(args) == 1 && args[0] == "off":
		return &acmeproxy.LimitConfig{Off: true}, nil
	case len(args) == 0, len(args) > 2, isCap && len(args) == 2, !isCap && !override && len(args) == 1:
		return nil, d.Errf("acme_proxy: %s: want %s, got %d values", key, want, len(args))
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return nil, d.Errf("acme_proxy: %s: count %q is not a positive number (or off)", key, args[0])
	}
	lc := &acmeproxy.LimitConfig{Count: n}
	if len(args) == 2 {
		p, err := PositiveDuration(d, key+" period", args[1])
		if err != nil {
			return nil, err
		}
		lc.Period = acmeproxy.Duration(p)
	}
	return lc, nil
}
