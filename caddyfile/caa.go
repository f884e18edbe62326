package caddyfile

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
)

// parseCAA reads `caa { identities <names...>; account_uri_prefix <URL> }`
// into a CAA configuration, which a repeated block extends, checked as
// Provision checks it (unless it holds a placeholder).
func parseCAA(d *caddyfile.Dispenser, c *acmeproxy.CAAConfig) (*acmeproxy.CAAConfig, error) {
	if d.NextArg() {
		return nil, d.Errf("acme_proxy: caa: unexpected argument %q; identities and account_uri_prefix go in a block", d.Val())
	}
	if c == nil {
		c = new(acmeproxy.CAAConfig)
	}
	for n := d.Nesting(); d.NextBlock(n); {
		var err error
		switch sub := d.Val(); sub {
		case "identities":
			err = AppendArgs(d, "caa.identities", &c.Identities)
		case "account_uri_prefix":
			if c.AccountURIPrefix != "" {
				return nil, d.Err("acme_proxy: caa.account_uri_prefix: given twice")
			}
			c.AccountURIPrefix, err = OneArg(d, "caa.account_uri_prefix")
		default:
			err = d.Errf("acme_proxy: caa: unknown setting %q (want identities or account_uri_prefix)", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	// Placeholders ({env.*}) are replaced at provision, where what is
	// made of them is checked; a block without one is checked now.
	if strings.Contains(c.AccountURIPrefix+strings.Join(c.Identities, " "), "{") {
		return c, nil
	}
	if err := c.Validate(); err != nil {
		return nil, d.Errf("acme_proxy: caa.%w", err)
	}
	return c, nil
}
