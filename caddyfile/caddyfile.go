// Package caddyfile adapts the acme_proxy global option and handler
// directive of the Caddyfile to JSON, and holds the helpers the signer
// modules' own UnmarshalCaddyfile methods share, so that every key's
// error reads alike ("acme_proxy: <key>: …").
//
// It builds that JSON from the config structs of the packages it configures
// and never imports the root package, which imports this one for its init
// registrations.
package caddyfile

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddypki"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("acme_proxy", parseGlobal)
	httpcaddyfile.RegisterDirective("acme_proxy", parseHandler)
	// The handler answers only under its prefix and passes everything else
	// on, so it goes ahead of the routing blocks (handle, route) and of
	// every handler that answers all it gets (respond, reverse_proxy,
	// file_server), yet after the middleware that should wrap it (header,
	// encode, basic_auth).
	httpcaddyfile.RegisterDirectiveOrder("acme_proxy", httpcaddyfile.Before, "invoke")
}

// handlerJSON is the JSON of http.handlers.acme_proxy, spelled out here
// because the Handler type lives in the root package.
type handlerJSON struct {
	Handler string `json:"handler"`
	acmeproxy.ProfileConfig
	Signer json.RawMessage `json:"signer,omitempty"`
}

// appJSON is the JSON of the acme_proxy app: its config, and Postgres,
// the root App's field of that name (spelled out here for the same reason
// as handlerJSON).
type appJSON struct {
	acmeproxy.AppConfig
	Postgres string `json:"postgres,omitempty"`
}

// parseGlobal reads the global option:
//
//	acme_proxy {
//		database [sqlite] <path> | postgres <dsn>
//		audit_retention <duration>|keep
//		order_retention <duration>|keep
//		certificate_retention <duration>|keep
//		notify webhook <url> { secret <s>; events <names...>; header <name> <value> }
//		notify email { smtp <host:port>; tls starttls|implicit|none; from <addr>; to <addr...>; username <u>; password <p>; helo <name>; events <names...> }
//		notify script <path> [<args...>] { events <names...> }
//	}
//
// notify may repeat; each is one destination, with its own event filter
// (default: every event).
func parseGlobal(d *caddyfile.Dispenser, existing any) (any, error) {
	var cfg appJSON
	if app, ok := existing.(httpcaddyfile.App); ok {
		if err := json.Unmarshal(app.Value, &cfg); err != nil {
			return nil, err
		}
	}
	d.Next() // the option name
	if d.NextArg() {
		return nil, d.Errf("acme_proxy: unexpected argument %q; settings go in a block", d.Val())
	}
	// Each setting takes one value: given twice in a block, the first would
	// be dropped without a word. (A second acme_proxy global block merges
	// into the first, its settings replacing the first's.)
	seen := map[string]bool{}
	for n := d.Nesting(); d.NextBlock(n); {
		if key := d.Val(); key != "notify" {
			if err := Once(d, seen, key); err != nil {
				return nil, err
			}
		}
		var err error
		switch d.Val() {
		case "database":
			err = databaseArgs(d, &cfg)
		case "audit_retention":
			cfg.AuditRetention, err = retentionArg(d, "audit_retention")
		case "order_retention":
			cfg.OrderRetention, err = retentionArg(d, "order_retention")
		case "certificate_retention":
			cfg.CertificateRetention, err = retentionArg(d, "certificate_retention")
		case "notify":
			var dst notify.Destination
			if dst, err = parseNotify(d); err == nil {
				cfg.Notify = append(cfg.Notify, dst)
			}
		default:
			err = d.Errf("acme_proxy: unknown global option setting %q", d.Val())
		}
		if err != nil {
			return nil, err
		}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "acme_proxy", Value: raw}, nil
}

// databaseArgs reads database's values: a SQLite file (optionally after
// "sqlite"), or "postgres" and a DSN. The database of a later global
// acme_proxy block replaces an earlier one's, whichever its kind.
func databaseArgs(d *caddyfile.Dispenser, cfg *appJSON) error {
	args := d.RemainingArgs()
	var dialect, where string
	switch {
	case len(args) == 1 && args[0] == "postgres":
		return d.Err("acme_proxy: database postgres: want a DSN, such as postgres://user@host/db?sslmode=verify-full")
	case len(args) == 1:
		dialect, where = "sqlite", args[0]
	case len(args) == 2:
		dialect, where = args[0], args[1]
	default:
		return d.Errf("acme_proxy: database: want <path>, sqlite <path> or postgres <dsn>, got %d values", len(args))
	}
	switch dialect {
	case "sqlite":
		cfg.Database, cfg.Postgres = where, ""
	case "postgres":
		cfg.Database, cfg.Postgres = "", where
	default:
		return d.Errf("acme_proxy: database: unknown database %q; want sqlite or postgres", dialect)
	}
	return nil
}

// parseHandler reads the directive into a route holding one acme_proxy
// handler:
//
//	acme_proxy [<matcher>] {
//		profile    <name>
//		prefix     </path>
//		signer     <name> [{ … }] (the module acme_proxy.signers.<name>, which reads its own block)
//		challenges <types...>
//		resolvers  <dns servers...>
//		validation_ports { http <port>; tls <port> }
//		allow { domains <patterns...>; ip_ranges <cidrs...> }
//		deny  { domains <patterns...>; ip_ranges <cidrs...> }
//		crl_url    <http://… URL put in leaves as their CRL distribution point>
//		eab        required|optional (external account binding, RFC 8555 §7.3.4)
//		terms_of_service <URL> (the directory's meta.termsOfService)
//		website    <URL> (the directory's meta.website)
//		caa { identities <issuer domain names...>; account_uri_prefix <https://…/account/> } (CAA checks, RFC 8659/8657)
//		notify     webhook|email|script … (as in the global option; replaces its destinations for this profile)
//		certificate_profile <name> {
//			description     <text>
//			lifetime        <duration>
//			ext_key_usage   server_auth|client_auth...
//			key_types       ec256|ec384|ed25519|rsa2048|rsa3072|rsa4096|rsa8192...
//			max_identifiers <n>
//			common_name     on|off
//			upstream_profile <name> (signer relay: the upstream CA's profile to ask for)
//		}
//		default_certificate_profile <name>
//		renewal_info { point <fraction>; retry_after <duration> } (RFC 9773 windows)
//		limits { <limit> <count> [<period>] | off; override <account id | eab:label> <limit> <count> [<period>] } (see parseLimits)
//	}
func parseHandler(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	h.Next() // the directive name
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	h.Next() // the directive name again: extracting the matcher rewinds
	if h.NextArg() {
		return nil, h.Errf("acme_proxy: unexpected argument %q; settings go in a block", h.Val())
	}
	cfg := handlerJSON{Handler: "acme_proxy"}
	seen := map[string]bool{}
	for h.NextBlock(0) {
		if slices.Contains(singleProfileKeys, h.Val()) {
			if err := Once(h.Dispenser, seen, h.Val()); err != nil {
				return nil, err
			}
		}
		if err := parseProfileKey(h.Dispenser, &cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Profile == "" {
		return nil, h.Err("acme_proxy: profile: required")
	}
	if dflt := cfg.DefaultCertificateProfile; dflt != "" && cfg.CertificateProfiles[dflt] == nil {
		return nil, h.Errf("acme_proxy: default_certificate_profile: %q is not a certificate_profile of this block", dflt)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	route := caddyhttp.Route{HandlersRaw: []json.RawMessage{raw}}
	if matcherSet != nil {
		route.MatcherSetsRaw = []caddy.ModuleMap{matcherSet}
	}
	vals := []httpcaddyfile.ConfigValue{{Class: "route", Value: route}}
	// Caddy applies skip_install_trust to the pki CAs a Caddyfile names
	// (acme_server's, tls internal's) and, when it names none and
	// auto_https is on, to its default one, which it adds; a CA this
	// profile signs with is named here so that the option reaches it too,
	// and its root stays out of the system's trust store as the operator
	// asked. Naming one CA stops Caddy adding its default, so that is
	// named too while auto_https may use it.
	if id, ok := caddyCAOf(cfg.Signer); ok && h.Option("skip_install_trust") != nil {
		vals = append(vals, httpcaddyfile.ConfigValue{Class: "pki.ca", Value: &caddypki.CA{ID: id}})
		if autoHTTPS, _ := h.Option("auto_https").([]string); id != caddypki.DefaultCAID && !slices.Contains(autoHTTPS, "off") {
			vals = append(vals, httpcaddyfile.ConfigValue{Class: "pki.ca", Value: &caddypki.CA{ID: caddypki.DefaultCAID}})
		}
	}
	return vals, nil
}

// caddyCAOf is the ID of the CA of Caddy's pki app that a profile's
// signer (its JSON) signs with: the local_ca signer's, which is the
// default signer, unless it signs with a CA of its own PEM files.
func caddyCAOf(signer json.RawMessage) (string, bool) {
	var s struct {
		Module string `json:"module"`
		CA     string `json:"ca"`
		Cert   string `json:"cert"`
	}
	if len(signer) > 0 {
		if err := json.Unmarshal(signer, &s); err != nil || s.Module != "local_ca" || s.Cert != "" {
			return "", false
		}
	}
	if s.CA == "" {
		return caddypki.DefaultCAID, true
	}
	return s.CA, true
}

// singleProfileKeys are the keys of the directive's block that take one
// value, and so may be given once: the others add to what earlier lines
// gave (challenges, resolvers, allow, deny, caa, notify,
// certificate_profile, limits) or refuse a repeat themselves
// (renewal_info, and validation_ports per port).
var singleProfileKeys = []string{"profile", "prefix", "signer", "crl_url", "eab", "terms_of_service", "website", "default_certificate_profile"}

// parseProfileKey reads one line (or block) of the directive's block.
func parseProfileKey(d *caddyfile.Dispenser, cfg *handlerJSON) error {
	var err error
	switch key := d.Val(); key {
	case "profile":
		if cfg.Profile, err = OneArg(d, key); err == nil {
			if bad := acmeproxy.CheckProfileName(cfg.Profile); bad != nil {
				err = d.Errf("acme_proxy: profile: %v", bad)
			}
		}
	case "prefix":
		cfg.Prefix, err = OneArg(d, key)
	case "signer":
		cfg.Signer, err = parseSigner(d)
	case "challenges":
		err = AppendArgs(d, key, &cfg.Challenges)
	case "resolvers":
		err = resolversArg(d, &cfg.Resolvers)
	case "validation_ports":
		if cfg.ValidationPorts == nil {
			cfg.ValidationPorts = new(acmeproxy.ValidationPorts)
		}
		err = parseValidationPorts(d, cfg.ValidationPorts)
	case "allow":
		cfg.Allow, err = parsePolicy(d, key, cfg.Allow)
	case "deny":
		cfg.Deny, err = parsePolicy(d, key, cfg.Deny)
	case "crl_url":
		cfg.CRLURL, err = OneArg(d, key)
	case "eab":
		if cfg.EAB, err = OneArg(d, key); err == nil && cfg.EAB != "required" && cfg.EAB != "optional" {
			err = d.Errf("acme_proxy: eab: %q must be required or optional", cfg.EAB)
		}
	case "terms_of_service":
		cfg.TermsOfService, err = OneArg(d, key)
	case "website":
		cfg.Website, err = OneArg(d, key)
	case "caa":
		cfg.CAA, err = parseCAA(d, cfg.CAA)
	case "notify":
		var dst notify.Destination
		if dst, err = parseNotify(d); err == nil {
			cfg.Notify = append(cfg.Notify, dst)
		}
	case "certificate_profile":
		err = parseCertificateProfile(d, &cfg.ProfileConfig)
	case "default_certificate_profile":
		cfg.DefaultCertificateProfile, err = OneArg(d, key)
	case "renewal_info":
		err = parseRenewalInfo(d, &cfg.ProfileConfig)
	case "limits":
		err = parseLimits(d, &cfg.ProfileConfig)
	default:
		err = d.Errf("acme_proxy: unknown subdirective %q", key)
	}
	return err
}

// parseCertificateProfile reads `certificate_profile <name> { … }` into
// cfg.CertificateProfiles, checked as Provision checks it.
func parseCertificateProfile(d *caddyfile.Dispenser, cfg *acmeproxy.ProfileConfig) error {
	name, err := OneArg(d, "certificate_profile")
	if err != nil {
		return err
	}
	if bad := acmeproxy.CheckCertificateProfileName(name); bad != nil {
		return d.Errf("acme_proxy: certificate_profile: %v", bad)
	}
	if cfg.CertificateProfiles[name] != nil {
		return d.Errf("acme_proxy: certificate_profile %s: defined twice", name)
	}
	cp := new(acmeproxy.CertificateProfileConfig)
	seen := map[string]bool{}
	for n := d.Nesting(); d.NextBlock(n); {
		key := "certificate_profile." + name + "." + d.Val()
		if sub := d.Val(); sub != "ext_key_usage" && sub != "key_types" {
			if err := Once(d, seen, key); err != nil {
				return err
			}
		}
		switch sub := d.Val(); sub {
		case "description":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("acme_proxy: %s: want a value", key)
			}
			cp.Description = strings.Join(args, " ")
		case "lifetime":
			v, err := DurationArg(d, key)
			if err != nil {
				return err
			}
			cp.Lifetime = acmeproxy.Duration(v)
		case "ext_key_usage":
			err = AppendArgs(d, key, &cp.ExtKeyUsage)
		case "key_types":
			err = AppendArgs(d, key, &cp.KeyTypes)
		case "max_identifiers":
			v, err := OneArg(d, key)
			if err != nil {
				return err
			}
			if cp.MaxIdentifiers, err = strconv.Atoi(v); err != nil || cp.MaxIdentifiers < 1 {
				return d.Errf("acme_proxy: %s: %q is not a positive number", key, v)
			}
		case "common_name":
			v, err := OneArg(d, key)
			if err != nil {
				return err
			}
			switch v {
			case "on":
				cp.CommonName = nil
			case "off":
				f := false
				cp.CommonName = &f
			default:
				return d.Errf("acme_proxy: %s: want on or off, not %q", key, v)
			}
		case "upstream_profile":
			cp.UpstreamProfile, err = OneArg(d, key)
		default:
			return d.Errf("acme_proxy: certificate_profile %s: unknown setting %q (want description, lifetime, ext_key_usage, key_types, max_identifiers, common_name or upstream_profile)", name, sub)
		}
		if err != nil {
			return err
		}
	}
	if err := cp.Validate(); err != nil {
		return d.Errf("acme_proxy: certificate_profile.%s.%w", name, err)
	}
	if cfg.CertificateProfiles == nil {
		cfg.CertificateProfiles = map[string]*acmeproxy.CertificateProfileConfig{}
	}
	cfg.CertificateProfiles[name] = cp
	return nil
}

// SignerNamespace is the Caddy module namespace of the signers:
// `signer <name>` names the module acme_proxy.signers.<name>.
const SignerNamespace = "acme_proxy.signers"

// parseSigner reads `signer <name> [{ ... }]` into the signer's module JSON:
// the module, looked up by ID in Caddy's registry, reads its own block (as
// reverse_proxy's transport does), so a new signer needs no line here.
func parseSigner(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.Errf("acme_proxy: signer: want one value, got 0")
	}
	name := d.Val()
	id := SignerNamespace + "." + name
	if _, err := caddy.GetModule(id); err != nil {
		return nil, d.Errf("acme_proxy: signer: unknown signer %q (want %s)", name, strings.Join(signerNames(), ", "))
	}
	unm, err := caddyfile.UnmarshalModule(d, id)
	if err != nil {
		return nil, err
	}
	raw := caddyconfig.JSONModuleObject(unm, "module", name, nil)
	if raw == nil {
		return nil, d.Errf("acme_proxy: signer %s: its config does not marshal as a JSON object", name)
	}
	return raw, nil
}

// signerNames are the names of the registered signer modules, sorted.
func signerNames() []string {
	var names []string
	for _, m := range caddy.GetModules(SignerNamespace) {
		names = append(names, m.ID.Name())
	}
	slices.Sort(names)
	return names
}

// StartSigner begins a signer module's UnmarshalCaddyfile: it consumes the
// signer's name, which must stand alone on its line (settings go in the
// block that follows).
func StartSigner(d *caddyfile.Dispenser) error {
	d.Next() // the signer's name
	if n := d.CountRemainingArgs(); n > 0 {
		return d.Errf("acme_proxy: signer: want one value, got %d", n+1)
	}
	return nil
}

// resolversArg appends the resolvers of one `resolvers` line to list,
// refusing one that validate.New would refuse at provision.
func resolversArg(d *caddyfile.Dispenser, list *[]string) error {
	n := len(*list)
	if err := AppendArgs(d, "resolvers", list); err != nil {
		return err
	}
	for _, r := range (*list)[n:] {
		if _, err := validate.ResolverAddr(r); err != nil {
			return d.Errf("acme_proxy: resolvers: %q: %w", r, err)
		}
	}
	return nil
}

// parseValidationPorts reads `validation_ports { http <port>; tls <port> }`.
func parseValidationPorts(d *caddyfile.Dispenser, p *acmeproxy.ValidationPorts) error {
	if d.NextArg() {
		return d.Errf("acme_proxy: validation_ports: unexpected argument %q; ports go in a block", d.Val())
	}
	for n := d.Nesting(); d.NextBlock(n); {
		var dst *int
		switch d.Val() {
		case "http":
			dst = &p.HTTP
		case "tls":
			dst = &p.TLS
		default:
			return d.Errf("acme_proxy: validation_ports: unknown setting %q (want http or tls)", d.Val())
		}
		key := "validation_ports." + d.Val()
		if *dst != 0 {
			return d.Errf("acme_proxy: %s: given twice", key)
		}
		v, err := OneArg(d, key)
		if err != nil {
			return err
		}
		port, err := strconv.Atoi(v)
		if err != nil || port < 1 || port > 65535 {
			return d.Errf("acme_proxy: %s: %q is not a port", key, v)
		}
		*dst = port
	}
	return nil
}

// parsePolicy reads an allow or deny block into pol, which a repeated block
// extends.
func parsePolicy(d *caddyfile.Dispenser, key string, pol *acmeproxy.IdentifierPolicy) (*acmeproxy.IdentifierPolicy, error) {
	if d.NextArg() {
		return nil, d.Errf("acme_proxy: %s: unexpected argument %q; domains and ip_ranges go in a block", key, d.Val())
	}
	if pol == nil {
		pol = new(acmeproxy.IdentifierPolicy)
	}
	for n := d.Nesting(); d.NextBlock(n); {
		var err error
		switch sub := d.Val(); sub {
		case "domains":
			err = AppendArgs(d, key+".domains", &pol.Domains)
		case "ip_ranges":
			err = AppendArgs(d, key+".ip_ranges", &pol.IPRanges)
		default:
			err = d.Errf("acme_proxy: %s: unknown setting %q (want domains or ip_ranges)", key, sub)
		}
		if err != nil {
			return nil, err
		}
	}
	return pol, nil
}

// parseNotify reads one notification destination:
//
//	notify webhook <url> [{ secret <s>; events <names...>; header <name> <value> }]
//	notify email { smtp <host:port>; tls starttls|implicit|none; from <addr>; to <addr...>; username <u>; password <p>; helo <name>; events <names...> }
//	notify script <path> [<args...>] [{ events <names...> }]
func parseNotify(d *caddyfile.Dispenser) (notify.Destination, error) {
	var dst notify.Destination
	if !d.NextArg() {
		return dst, d.Err("acme_proxy: notify: want webhook, email or script")
	}
	dst.Type = d.Val()
	args := d.RemainingArgs()
	switch dst.Type {
	case notify.TypeWebhook:
		if len(args) != 1 {
			return dst, d.Errf("acme_proxy: notify webhook: want one URL, got %d values", len(args))
		}
		dst.URL = args[0]
	case notify.TypeEmail:
		if len(args) != 0 {
			return dst, d.Errf("acme_proxy: notify email: unexpected argument %q; settings go in a block", args[0])
		}
	case notify.TypeScript:
		if len(args) == 0 {
			return dst, d.Err("acme_proxy: notify script: want a path")
		}
		dst.Command, dst.Args = args[0], args[1:]
	default:
		return dst, d.Errf("acme_proxy: notify: unknown destination %q (want webhook, email or script)", dst.Type)
	}
	key := func(k string) string { return "notify " + dst.Type + " " + k }
	seen := map[string]bool{}
	for n := d.Nesting(); d.NextBlock(n); {
		var err error
		sub := d.Val()
		if sub != "events" && sub != "to" && sub != "header" {
			if err := Once(d, seen, key(sub)); err != nil {
				return dst, err
			}
		}
		switch {
		case sub == "events":
			err = AppendArgs(d, key("events"), &dst.Events)
		case sub == "secret" && dst.Type == notify.TypeWebhook:
			dst.Secret, err = OneArg(d, key("secret"))
		case sub == "header" && dst.Type == notify.TypeWebhook:
			hv := d.RemainingArgs()
			if len(hv) != 2 {
				return dst, d.Errf("acme_proxy: %s: want a name and a value, got %d values", key("header"), len(hv))
			}
			if _, dup := dst.Headers[hv[0]]; dup {
				return dst, d.Errf("acme_proxy: %s: %s is given twice", key("header"), hv[0])
			}
			if dst.Headers == nil {
				dst.Headers = map[string]string{}
			}
			dst.Headers[hv[0]] = hv[1]
		case sub == "smtp" && dst.Type == notify.TypeEmail:
			dst.SMTP, err = OneArg(d, key("smtp"))
		case sub == "tls" && dst.Type == notify.TypeEmail:
			dst.TLS, err = OneArg(d, key("tls"))
		case sub == "from" && dst.Type == notify.TypeEmail:
			dst.From, err = OneArg(d, key("from"))
		case sub == "to" && dst.Type == notify.TypeEmail:
			err = AppendArgs(d, key("to"), &dst.To)
		case sub == "username" && dst.Type == notify.TypeEmail:
			dst.Username, err = OneArg(d, key("username"))
		case sub == "password" && dst.Type == notify.TypeEmail:
			dst.Password, err = OneArg(d, key("password"))
		case sub == "helo" && dst.Type == notify.TypeEmail:
			dst.HELO, err = OneArg(d, key("helo"))
		default:
			err = d.Errf("acme_proxy: notify %s: unknown setting %q", dst.Type, sub)
		}
		if err != nil {
			return dst, err
		}
	}
	// Placeholders ({env.*}) are replaced at provision, where a URL (an
	// smtp, a helo, a command) made of one is checked; a literal one is
	// checked now.
	if !strings.Contains(dst.URL+dst.SMTP+dst.HELO+dst.Command, "{") {
		if err := dst.Validate(); err != nil {
			return dst, d.Errf("acme_proxy: %v", err)
		}
	}
	return dst, nil
}

// Once records in seen that key was given in a block, and refuses it the
// second time: a key that takes one value, given twice, would otherwise
// keep the last silently.
func Once(d *caddyfile.Dispenser, seen map[string]bool, key string) error {
	if seen[key] {
		return d.Errf("acme_proxy: %s: given twice", key)
	}
	seen[key] = true
	return nil
}

// oneArg reads the single argument of key.
func OneArg(d *caddyfile.Dispenser, key string) (string, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return "", d.Errf("acme_proxy: %s: want one value, got %d", key, len(args))
	}
	return args[0], nil
}

// durationArg reads the single positive duration of key, in Caddy's
// syntax (which adds days: "7d").
func DurationArg(d *caddyfile.Dispenser, key string) (caddy.Duration, error) {
	v, err := OneArg(d, key)
	if err != nil {
		return 0, err
	}
	return PositiveDuration(d, key, v)
}

// NonNegativeDurationArg reads key's one value as DurationArg does, but
// takes 0: for a wait that may be none.
func NonNegativeDurationArg(d *caddyfile.Dispenser, key string) (caddy.Duration, error) {
	v, err := OneArg(d, key)
	if err != nil {
		return 0, err
	}
	return duration(d, key, v, true)
}

// PositiveDuration parses v, the value of key, as DurationArg does.
func PositiveDuration(d *caddyfile.Dispenser, key, v string) (caddy.Duration, error) {
	return duration(d, key, v, false)
}

// duration parses v, the value of key: positive, or also 0 when zeroOK.
func duration(d *caddyfile.Dispenser, key, v string, zeroOK bool) (caddy.Duration, error) {
	dur, err := ParseDuration(v)
	switch {
	case err != nil:
		return 0, d.Errf("acme_proxy: %s: %q is not a duration: %w", key, v, err)
	case zeroOK && dur < 0:
		return 0, d.Errf("acme_proxy: %s: %q must not be negative", key, v)
	case !zeroOK && dur <= 0:
		return 0, d.Errf("acme_proxy: %s: %q must be positive", key, v)
	}
	return caddy.Duration(dur), nil
}

// ErrNotADuration says what a duration looks like, for a value that is
// not one.
var ErrNotADuration = errors.New("want a number and a unit (ms, s, m, h or d), such as 90s, 12h or 7d")

// ParseDuration is caddy.ParseDuration with an error in the config's own
// terms (ErrNotADuration): Caddy's quotes the value as it rewrote its days
// into hours, so "7days" got `unknown unit "hays" in duration "168hays"`.
func ParseDuration(v string) (time.Duration, error) {
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, ErrNotADuration
	}
	return dur, nil
}

// retentionArg reads a retention setting, key: a positive duration in
// Caddy's syntax, kept as written, or "keep".
func retentionArg(d *caddyfile.Dispenser, key string) (string, error) {
	v, err := OneArg(d, key)
	if err != nil || v == acmeproxy.AuditRetentionKeep {
		return v, err
	}
	dur, err := ParseDuration(v)
	if err != nil {
		return "", d.Errf("acme_proxy: %s: %q is not a duration or %q: %w", key, v, acmeproxy.AuditRetentionKeep, err)
	}
	if dur <= 0 {
		return "", d.Errf("acme_proxy: %s: %q must be positive", key, v)
	}
	return v, nil
}

// appendArgs appends the arguments of key to list, so a long list may be
// split over several lines.
func AppendArgs(d *caddyfile.Dispenser, key string, list *[]string) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("acme_proxy: %s: want at least one value", key)
	}
	*list = append(*list, args...)
	return nil
}
