package caddyacmeproxy

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"

	apcaddyfile "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
	"github.com/acmeproxy/caddy-acme-proxy/signer/relay"
)

// Relay is acme_proxy.signers.relay: it obtains each certificate from an
// upstream ACME CA with an upstream account of its own, kept in Caddy
// storage. Finalize answers processing; a relay_issue job does the work.
type Relay struct {
	relay.Config
	*relay.Signer `json:"-"`
}

// CaddyModule returns the Caddy module information.
func (*Relay) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "acme_proxy.signers.relay", New: func() caddy.Module { return new(Relay) }}
}

// UnmarshalCaddyfile reads the block of `signer relay`:
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
//		prepare_upstream    on|off
//	}
//
// Which settings go together (dns, propagation_timeout,
// propagation_delay and resolvers with dns01 only) is Provision's call;
// this checks each value's own shape.
func (r *Relay) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := apcaddyfile.StartSigner(d); err != nil {
		return err
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		// resolvers add to earlier lines; every other key takes one value.
		if d.Val() != "resolvers" {
			if err := apcaddyfile.Once(d, seen, "signer."+d.Val()); err != nil {
				return err
			}
		}
		var err error
		switch key := d.Val(); key {
		case "directory":
			r.Directory, err = apcaddyfile.OneArg(d, "signer.directory")
		case "email":
			r.Email, err = apcaddyfile.OneArg(d, "signer.email")
		case "eab":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("acme_proxy: signer.eab: want a key id and an hmac key, got %d values", len(args))
			}
			r.EAB = &relay.EAB{KeyID: args[0], MACKey: args[1]}
		case "trusted_roots":
			r.TrustedRoots, err = apcaddyfile.OneArg(d, "signer.trusted_roots")
		case "challenge":
			r.Challenge, err = apcaddyfile.OneArg(d, "signer.challenge")
			switch r.Challenge {
			case relay.ChallengeDNS01, relay.ChallengeHTTP01, relay.ChallengeBypass, "":
			default:
				err = d.Errf("acme_proxy: signer.challenge: %q must be dns01, http01 or bypass", r.Challenge)
			}
		case "dns":
			if !d.NextArg() {
				return d.Errf("acme_proxy: signer.dns: want a DNS provider name")
			}
			name := d.Val()
			unm, uerr := caddyfile.UnmarshalModule(d, "dns.providers."+name)
			if uerr != nil {
				return d.Errf("acme_proxy: signer.dns: %v", uerr)
			}
			r.DNSRaw = caddyconfig.JSONModuleObject(unm, "name", name, nil)
		case "propagation_timeout":
			var v string
			if v, err = apcaddyfile.OneArg(d, "signer.propagation_timeout"); err == nil {
				if v == "-1" {
					r.PropagationTimeout = caddy.Duration(-1)
				} else {
					r.PropagationTimeout, err = apcaddyfile.PositiveDuration(d, "signer.propagation_timeout", v)
				}
			}
		case "propagation_delay":
			r.PropagationDelay, err = apcaddyfile.NonNegativeDurationArg(d, "signer.propagation_delay")
		case "resolvers":
			err = apcaddyfile.AppendArgs(d, "signer.resolvers", &r.Resolvers)
		case "prepare_upstream":
			if r.PrepareUpstream, err = apcaddyfile.OneArg(d, "signer.prepare_upstream"); err == nil {
				if _, perr := prepareUpstream(r.PrepareUpstream); perr != nil {
					err = d.Errf("acme_proxy: %v", perr)
				}
			}
		default:
			err = d.Errf("acme_proxy: signer relay: unknown setting %q", key)
		}
		if err != nil {
			return err
		}
	}
	if r.Directory == "" {
		return d.Err("acme_proxy: signer.directory: required by signer relay")
	}
	return nil
}

// Provision checks the configuration, loads the DNS provider module and
// builds the signer. It does not contact the upstream.
func (r *Relay) Provision(ctx caddy.Context) error {
	// A placeholder that is empty fails in every setting that takes
	// them: the directory is required, the email is the contact the
	// upstream account is registered with once, and the EAB's key id
	// and HMAC key bind it.
	repl := caddy.NewReplacer()
	opts := relay.Options{Challenge: r.Challenge, Storage: ctx.Storage()}
	var err error
	if opts.Directory, err = expandRequired(repl, "signer.directory", r.Directory); err != nil {
		return err
	}
	if opts.Email, err = expandRequired(repl, "signer.email", r.Email); err != nil {
		return err
	}
	if opts.Directory == "" {
		return fmt.Errorf("signer.directory: required")
	}
	if opts.Challenge == "" {
		opts.Challenge = relay.ChallengeHTTP01
		if r.DNSRaw != nil {
			opts.Challenge = relay.ChallengeDNS01
		}
	}
	switch opts.Challenge {
	case relay.ChallengeDNS01, relay.ChallengeHTTP01, relay.ChallengeBypass:
	default:
		return fmt.Errorf("signer.challenge: %q must be dns01, http01 or bypass", opts.Challenge)
	}
	if r.DNSRaw != nil && opts.Challenge != relay.ChallengeDNS01 {
		return fmt.Errorf("signer.dns: only used with challenge dns01, not %s", opts.Challenge)
	}
	if r.PropagationDelay < 0 {
		return fmt.Errorf("signer.propagation_delay: must not be negative")
	}
	if r.PropagationTimeout < -1 {
		return fmt.Errorf("signer.propagation_timeout: must be positive, or -1 to skip the check")
	}
	if opts.Challenge != relay.ChallengeDNS01 {
		// They tune the dns01 solver alone; elsewhere they would be
		// read by nothing.
		for _, o := range []struct {
			key string
			set bool
		}{
			{"propagation_timeout", r.PropagationTimeout != 0},
			{"propagation_delay", r.PropagationDelay != 0},
			{"resolvers", len(r.Resolvers) > 0},
		} {
			if o.set {
				return fmt.Errorf("signer.%s: only used with challenge dns01, not %s", o.key, opts.Challenge)
			}
		}
	}
	if opts.Challenge == relay.ChallengeDNS01 {
		if r.DNSRaw == nil {
			return fmt.Errorf("signer.dns: required with challenge dns01")
		}
		// As caddytls's ACME issuer loads its DNS provider.
		mod, err := ctx.LoadModule(r, "DNSRaw")
		if err != nil {
			return fmt.Errorf("signer.dns: %w", err)
		}
		prov, ok := mod.(certmagic.DNSProvider)
		if !ok {
			return fmt.Errorf("signer.dns: module %T cannot append and delete DNS records", mod)
		}
		opts.DNS = &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{
			DNSProvider:        prov,
			PropagationDelay:   time.Duration(r.PropagationDelay),
			PropagationTimeout: time.Duration(r.PropagationTimeout),
			Resolvers:          r.Resolvers,
			Logger:             ctx.Logger().Named("dns"),
		}}
	}
	if r.EAB != nil {
		opts.EAB = &acme.EAB{}
		if opts.EAB.KeyID, err = expandRequired(repl, "signer.eab: key id", r.EAB.KeyID); err != nil {
			return err
		}
		if opts.EAB.MACKey, err = expandRequired(repl, "signer.eab: hmac key", r.EAB.MACKey); err != nil {
			return err
		}
	}
	if r.TrustedRoots != "" {
		pem, err := os.ReadFile(r.TrustedRoots)
		if err != nil {
			return fmt.Errorf("signer.trusted_roots: %w", err)
		}
		opts.RootCAs = x509.NewCertPool()
		if !opts.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("signer.trusted_roots: %q holds no PEM certificate", r.TrustedRoots)
		}
	}
	if opts.PrepareUpstream, err = prepareUpstream(r.PrepareUpstream); err != nil {
		return err
	}
	if opts.Challenge == relay.ChallengeHTTP01 {
		tlsApp, err := ctx.App("tls")
		if err != nil {
			return fmt.Errorf("signer.challenge: http01 answers through the tls app: %w", err)
		}
		opts.HTTPChallengeIssuerKeys = httpChallengeIssuerKeys(tlsApp.(*caddytls.TLS))
	}
	opts.Observe = observeUpstream
	// The config's context: done when Caddy unloads it, before any
	// module's Cleanup, so preparations stop as early as they can.
	opts.Context = ctx
	if r.Signer, err = relay.New(opts); err != nil {
		if oe, ok := errors.AsType[*relay.OptionError](err); ok {
			return fmt.Errorf("signer.%s: %s", oe.Option, oe.Problem)
		}
		return fmt.Errorf("signer: %w", err)
	}
	return nil
}

// Cleanup stops the signer's background preparations and waits for
// them: a reload leaves none of the old config's running on.
func (r *Relay) Cleanup() error {
	if r.Signer == nil {
		return nil
	}
	return r.Signer.Close()
}

// acmeCapable is how caddytls recognizes the issuers it asks to answer an
// HTTP challenge (caddytls.TLS.HandleHTTPChallenge).
type acmeCapable interface{ GetACMEIssuer() *caddytls.ACMEIssuer }

// prepareUpstream reads signer.prepare_upstream: on, off, or unset (off).
func prepareUpstream(v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off", "":
		return false, nil
	}
	return false, fmt.Errorf("signer.prepare_upstream: %q must be on or off", v)
}

// httpChallengeIssuerKeys returns, for a name, the issuer keys under
// which this instance's TLS app looks up an http-01 challenge for it in
// storage: those of every issuer of the automation policy it picks for
// the name (the first policy whose subjects cover it, or with none, as
// caddytls.TLS.getAutomationPolicyForName picks), or of Caddy's default
// issuer when the policy names none or no policy matches. A policy
// without an ACME issuer does not consult storage at all, so it
// contributes no key; the relay then relies on the upstream's own key.
func httpChallengeIssuerKeys(tlsApp *caddytls.TLS) func(name string) []string {
	defaultKey := (&certmagic.ACMEIssuer{CA: certmagic.DefaultACME.CA}).IssuerKey()
	return func(name string) []string {
		var ap *caddytls.AutomationPolicy
		if tlsApp.Automation != nil {
			for _, p := range tlsApp.Automation.Policies {
				if covers(p, name) {
					ap = p
					break
				}
			}
		}
		if ap == nil || len(ap.Issuers) == 0 {
			return []string{defaultKey}
		}
		var (
			keys []string
			acme bool
		)
		for _, iss := range ap.Issuers {
			if _, ok := iss.(acmeCapable); ok {
				acme = true
			}
			keys = append(keys, iss.IssuerKey())
		}
		if !acme {
			return nil
		}
		return keys
	}
}

func covers(p *caddytls.AutomationPolicy, name string) bool {
	subjects := p.Subjects()
	if len(subjects) == 0 {
		return true
	}
	for _, s := range subjects {
		if certmagic.MatchWildcard(name, s) {
			return true
		}
	}
	return false
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Relay)(nil)
	_ caddy.CleanerUpper    = (*Relay)(nil)
	_ caddyfile.Unmarshaler = (*Relay)(nil)
)
