package caddyfile

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/acmeproxy/caddy-acme-proxy/signer/relay"
)

// parseRelay reads the block of `signer relay`:
//
//	signer relay {
//		directory           <url>
//		email               <address>
//		eab                 <key id> <hmac key>
//		trusted_roots       <pem file>
//		challenge           dns01|http01|bypass
//		dns                 <provider> [<args...>] [{ <provider settings> }]
//		propagation_timeout <duration>|-1
//		propagation_delay   <duration>
//		resolvers           <dns servers...>
//	}
//
// Which settings go together (dns with dns01) is the module's Provision's
// call; this checks each value's own shape.
func parseRelay(d *caddyfile.Dispenser) (any, error) {
	cfg := struct {
		Module string `json:"module"`
		relay.Config
	}{Module: "relay"}
	for n := d.Nesting(); d.NextBlock(n); {
		var err error
		switch key := d.Val(); key {
		case "directory":
			cfg.Directory, err = oneArg(d, "signer.directory")
		case "email":
			cfg.Email, err = oneArg(d, "signer.email")
		case "eab":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("acme_proxy: signer.eab: want a key id and an hmac key, got %d values", len(args))
			}
			cfg.EAB = &relay.EAB{KeyID: args[0], MACKey: args[1]}
		case "trusted_roots":
			cfg.TrustedRoots, err = oneArg(d, "signer.trusted_roots")
		case "challenge":
			cfg.Challenge, err = oneArg(d, "signer.challenge")
			switch cfg.Challenge {
			case relay.ChallengeDNS01, relay.ChallengeHTTP01, relay.ChallengeBypass, "":
			default:
				err = d.Errf("acme_proxy: signer.challenge: %q must be dns01, http01 or bypass", cfg.Challenge)
			}
		case "dns":
			if !d.NextArg() {
				return nil, d.Errf("acme_proxy: signer.dns: want a DNS provider name")
			}
			name := d.Val()
			unm, uerr := caddyfile.UnmarshalModule(d, "dns.providers."+name)
			if uerr != nil {
				return nil, d.Errf("acme_proxy: signer.dns: %v", uerr)
			}
			cfg.DNSRaw = caddyconfig.JSONModuleObject(unm, "name", name, nil)
		case "propagation_timeout":
			var v string
			if v, err = oneArg(d, "signer.propagation_timeout"); err == nil {
				if v == "-1" {
					cfg.PropagationTimeout = caddy.Duration(-1)
				} else {
					cfg.PropagationTimeout, err = positiveDuration(d, "signer.propagation_timeout", v)
				}
			}
		case "propagation_delay":
			cfg.PropagationDelay, err = durationArg(d, "signer.propagation_delay")
		case "resolvers":
			err = appendArgs(d, "signer.resolvers", &cfg.Resolvers)
		default:
			err = d.Errf("acme_proxy: signer relay: unknown setting %q", key)
		}
		if err != nil {
			return nil, err
		}
	}
	if cfg.Directory == "" {
		return nil, d.Err("acme_proxy: signer.directory: required by signer relay")
	}
	return cfg, nil
}

// positiveDuration parses v, the value of key, as durationArg does.
func positiveDuration(d *caddyfile.Dispenser, key, v string) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("acme_proxy: %s: %q is not a duration: %w", key, v, err)
	}
	if dur <= 0 {
		return 0, d.Errf("acme_proxy: %s: %q must be positive", key, v)
	}
	return caddy.Duration(dur), nil
}
