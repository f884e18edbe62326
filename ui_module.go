package caddyacmeproxy

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/webui"
)

// defaultUIUser is the placeholder Caddy's authentication handler
// (basic_auth, and any http.authentication provider) sets to the user it
// authenticated.
const defaultUIUser = "{http.auth.user.id}"

// UI is http.handlers.acme_proxy_ui: the operator's web page, mounted on a
// site of the operator's choice, under Prefix. Requests outside the prefix
// go to the next handler.
//
// It does not authenticate anyone: Caddy does, in front of it. At request
// time it requires the User placeholder (default {http.auth.user.id},
// which Caddy's authentication handler sets) to be non-empty, or a client
// certificate that Caddy's TLS verified; with neither it answers 403, so a
// route that forgot its basic_auth serves nothing. Checking each request,
// rather than walking the route at provision, holds however the route is
// built (matchers, subroutes, forward_auth's handle_response).
type UI struct {
	// Prefix is the path the pages live under; default "/".
	Prefix string `json:"prefix,omitempty"`
	// User is a placeholder naming the authenticated user; default
	// {http.auth.user.id}. Behind forward_auth, name the header it copies
	// from the auth service: {http.request.header.Remote-User}.
	User string `json:"user,omitempty"`
	// InsecureNoAuth serves requests with no authenticated user, as
	// "anonymous"; a warning is logged at start. Only for a page that
	// nobody else can reach.
	InsecureNoAuth bool `json:"insecure_no_auth,omitempty"`

	ui *webui.UI
}

// CaddyModule returns the Caddy module information.
func (*UI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.acme_proxy_ui", New: func() caddy.Module { return new(UI) }}
}

// Provision finds the acme_proxy app and builds the pages over its
// operator layer.
func (u *UI) Provision(ctx caddy.Context) error {
	if u.User == "" {
		u.User = defaultUIUser
	}
	appMod, err := ctx.App("acme_proxy")
	if err != nil {
		return fmt.Errorf("%w: %w", errNoApp, err)
	}
	log := ctx.Logger()
	if u.InsecureNoAuth {
		log.Warn("acme_proxy_ui: insecure_no_auth is set: the operator page answers requests that nobody authenticated, " +
			"and can revoke certificates for them; put basic_auth, forward_auth or client certificates in front instead")
	}
	user := u.User
	u.ui, err = webui.New(webui.Config{
		Operator: appMod.(*App).Operator(), Prefix: u.Prefix, InsecureNoAuth: u.InsecureNoAuth, Logger: log,
		User: func(r *http.Request) string {
			repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			if !ok {
				return ""
			}
			return repl.ReplaceAll(user, "")
		},
	})
	if err != nil {
		return err
	}
	log.Info("acme_proxy_ui mounted", zap.String("prefix", u.Prefix), zap.String("user", u.User))
	return nil
}

// ServeHTTP serves the pages and passes anything else on.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !u.ui.Handles(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	u.ui.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*UI)(nil)
	_ caddyhttp.MiddlewareHandler = (*UI)(nil)
)
