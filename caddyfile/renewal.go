package caddyfile

import (
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// parseRenewalInfo reads
//
//	renewal_info {
//		point       <fraction of the lifetime, above 0 and below 1>
//		retry_after <duration, 1m to 24h>
//	}
//
// which places the renewal windows renewalInfo suggests (RFC 9773).
func parseRenewalInfo(d *caddyfile.Dispenser, cfg *acmeproxy.ProfileConfig) error {
	if d.NextArg() {
		return d.Errf("acme_proxy: renewal_info: unexpected argument %q; settings go in a block", d.Val())
	}
	if cfg.RenewalInfo != nil {
		return d.Err("acme_proxy: renewal_info: given twice")
	}
	ri := new(acmeproxy.RenewalInfoConfig)
	seen := map[string]bool{}
	for n := d.Nesting(); d.NextBlock(n); {
		key := "renewal_info." + d.Val()
		if err := Once(d, seen, key); err != nil {
			return err
		}
		switch d.Val() {
		case "point":
			v, err := OneArg(d, key)
			if err != nil {
				return err
			}
			// Written so that NaN, which no comparison holds for, fails.
			if ri.Point, err = strconv.ParseFloat(v, 64); err != nil || !(ri.Point > 0 && ri.Point < 1) {
				return d.Errf("acme_proxy: %s: %q is not a fraction above 0 and below 1 (0.67: two thirds into the life)", key, v)
			}
		case "retry_after":
			v, err := DurationArg(d, key)
			if err != nil {
				return err
			}
			if err := authority.CheckRenewalRetryAfter(time.Duration(v)); err != nil {
				return d.Errf("acme_proxy: %s: %v", key, err)
			}
			ri.RetryAfter = acmeproxy.Duration(v)
		default:
			return d.Errf("acme_proxy: renewal_info: unknown setting %q (want point or retry_after)", d.Val())
		}
	}
	cfg.RenewalInfo = ri
	return nil
}
