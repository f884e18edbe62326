package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/validate"
	"github.com/acmeproxy/caddy-acme-proxy/internal/forwarded"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Handler is http.handlers.acme_proxy: one ACME endpoint serving one
// profile under its prefix. Requests outside the prefix go to the next
// handler.
type Handler struct {
	acmeproxy.ProfileConfig

	// SignerRaw is the profile's signer module (acme_proxy.signers.*);
	// default local_ca with Caddy's local CA.
	SignerRaw json.RawMessage `json:"signer,omitempty" caddy:"namespace=acme_proxy.signers inline_key=module"`

	app    *App
	server *acmeproxy.Server
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.acme_proxy", New: func() caddy.Module { return new(Handler) }}
}

// Provision builds the profile's server and mounts it in the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	var err error
	if h.Notify, err = expandNotify(h.Notify); err != nil {
		return err
	}
	if err := expandProfile(&h.ProfileConfig); err != nil {
		return err
	}
	h.ProfileConfig.SetDefaults()
	if err := h.ProfileConfig.Validate(); err != nil {
		return err
	}
	if err := checkReachable(ctx, h.Profile); err != nil {
		return err
	}
	appMod, err := ctx.App("acme_proxy")
	if err != nil {
		return fmt.Errorf("%w: %w", errNoApp, err)
	}
	h.app = appMod.(*App)

	if h.SignerRaw == nil {
		h.SignerRaw = json.RawMessage(`{"module":"local_ca"}`)
	}
	mod, err := ctx.LoadModule(h, "SignerRaw")
	if err != nil {
		return fmt.Errorf("signer: %w", err)
	}
	sgn, ok := mod.(signer.Signer)
	if !ok {
		return fmt.Errorf("signer: module %T is not a signer", mod)
	}
	if l, ok := mod.(*LocalCA); ok && h.CRLURL == "" && l.leafLifetime() > shortLived {
		return fmt.Errorf("crl_url: required when signer.lifetime (%s) exceeds %s: a longer-lived leaf must carry a CRL distribution point",
			l.leafLifetime(), shortLived)
	}
	if err := checkCertificateProfileLifetimes(&h.ProfileConfig, mod); err != nil {
		return err
	}
	if err := checkUpstreamProfiles(&h.ProfileConfig, mod); err != nil {
		return err
	}
	if err := checkCRLURL(&h.ProfileConfig, mod); err != nil {
		return err
	}
	v, err := newValidator(&h.ProfileConfig)
	if err != nil {
		// Validate has checked the ports and the resolvers by New's own
		// rules (validate.ResolverAddr), so this is not expected.
		return fmt.Errorf("resolvers: %w", err)
	}
	dests, err := h.app.profileNotify(h.Profile, h.Notify)
	if err != nil {
		return err
	}
	// Built without touching the store: the app starts the server
	// (acmeproxy.Server.Start) once it has opened the store at Start.
	h.server, err = acmeproxy.PrepareServer(h.ProfileConfig, acmeproxy.Options{
		DB: h.app.db, Queue: h.app.queue, Signer: sgn, Validator: v, Logger: ctx.Logger(),
		SignerName: caddy.GetModuleName(mod),
		Notify:     dests, Metrics: serverMetrics{},
		Incarnation: h.app.incarnation,
	})
	if err != nil {
		return err
	}
	return h.app.register(h.server)
}

// expandProfile replaces the known placeholders ({env.CA_HOST}) of the
// profile's settings that differ from one deployment to the next: the
// URLs it publishes (crl_url, terms_of_service, website) and the names
// CAA records name it by (caa.identities, caa.account_uri_prefix). One
// that is empty fails, naming the key, rather than publish a URL or
// match CAA records against a name made without it; the profile's
// Validate then checks what they made.
func expandProfile(c *acmeproxy.ProfileConfig) error {
	repl := caddy.NewReplacer()
	var err error
	for _, s := range []struct {
		key string
		v   *string
	}{{"crl_url", &c.CRLURL}, {"terms_of_service", &c.TermsOfService}, {"website", &c.Website}} {
		if *s.v, err = expandRequired(repl, s.key, *s.v); err != nil {
			return err
		}
	}
	if c.CAA == nil {
		return nil
	}
	caa := *c.CAA
	caa.Identities = make([]string, len(c.CAA.Identities))
	for i, id := range c.CAA.Identities {
		if caa.Identities[i], err = expandRequired(repl, "caa.identities", id); err != nil {
			return err
		}
	}
	if caa.AccountURIPrefix, err = expandRequired(repl, "caa.account_uri_prefix", caa.AccountURIPrefix); err != nil {
		return err
	}
	c.CAA = &caa
	return nil
}

// checkCertificateProfileLifetimes refuses a certificate profile whose
// lifetime the local CA would not honour: it never widens its own.
func checkCertificateProfileLifetimes(cfg *acmeproxy.ProfileConfig, mod any) error {
	l, ok := mod.(*LocalCA)
	if !ok {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.CertificateProfiles)) {
		if lt := time.Duration(cfg.CertificateProfiles[name].Lifetime); lt > l.leafLifetime() {
			return fmt.Errorf("certificate_profiles.%s.lifetime: %s exceeds the local CA's signer.lifetime (%s)", name, lt, l.leafLifetime())
		}
	}
	return nil
}

// checkUpstreamProfiles refuses an upstream_profile where there is no
// upstream: only the relay signer obtains its leaves from another CA.
func checkUpstreamProfiles(cfg *acmeproxy.ProfileConfig, mod any) error {
	if _, ok := mod.(*Relay); ok {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.CertificateProfiles)) {
		if cfg.CertificateProfiles[name].UpstreamProfile != "" {
			return fmt.Errorf("certificate_profiles.%s.upstream_profile: only a relay signer has an upstream CA to ask for a profile; this profile's signer is %s",
				name, caddy.GetModuleName(mod))
		}
	}
	return nil
}

// checkCRLURL refuses a crl_url that no leaf would carry: only a signer
// whose CRL this server publishes (local_ca) puts it in its leaves; a
// relay's or a script's leaves come from a CA of their own. A front end
// (delegated) is configured as its worker, whose signer decides.
func checkCRLURL(cfg *acmeproxy.ProfileConfig, mod any) error {
	if cfg.CRLURL == "" {
		return nil
	}
	if _, ok := mod.(signer.CRLSigner); ok {
		return nil
	}
	if _, ok := mod.(*Delegated); ok {
		return nil
	}
	return fmt.Errorf("crl_url: only a signer whose CRL this server publishes (local_ca) puts it in its leaves; this profile's signer is %s",
		caddy.GetModuleName(mod))
}

// newValidator builds the challenge validator of a profile (defaults
// applied, checked): its ports, its resolvers, and its identifier policy
// for the hosts http-01 redirects to.
func newValidator(cfg *acmeproxy.ProfileConfig) (*validate.Validator, error) {
	v, err := validate.New(validate.Config{
		HTTPPort:       cfg.ValidationPorts.HTTP,
		TLSPort:        cfg.ValidationPorts.TLS,
		Resolvers:      cfg.Resolvers,
		RedirectPolicy: cfg.RedirectPolicy(),
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Cleanup unmounts the profile, first writing the summaries of refused
// revocations it still counts (a reload's last requests to it).
func (h *Handler) Cleanup() error {
	if h.app != nil && h.server != nil {
		h.server.Authority().FlushRefusals(context.Background(), true)
		h.app.unregister(h.server)
	}
	return nil
}

// ServeHTTP serves the profile's endpoints and passes anything else on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !h.server.Handles(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	// A request that comes before the app has opened the store waits for
	// it; the server answers 503 if the app stopped without.
	h.app.awaitStart(r.Context())
	// Behind a trusted proxy the client is the address Caddy read from
	// its headers (trusted_proxies), as Caddy's logs and matchers have
	// it, not the proxy's connection; and the scheme is the one the
	// proxy's client used (X-Forwarded-Proto, its last value, as Caddy's
	// reverse_proxy reads it from a trusted proxy), so that a front that
	// terminates TLS gives its clients https:// URLs. Nobody else's
	// X-Forwarded-Proto counts.
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		ctx := forwarded.FromTrustedProxy(r)
		if ip, _ := caddyhttp.GetVar(ctx, caddyhttp.ClientIPVarKey).(string); ip != "" {
			ctx = acmeproxy.WithClientIP(ctx, ip)
		}
		r = r.WithContext(ctx)
	}
	h.server.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
