package caddyacmeproxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/webui"
	"github.com/acmeproxy/caddy-acme-proxy/internal/forwarded"
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
	// Prefix is the path the pages live under; default "/". Under
	// handle_path, which strips its path before the page sees a request,
	// leave it out: the page puts the stripped path back in its links
	// (strippedPrefix).
	Prefix string `json:"prefix,omitempty"`
	// User is a placeholder naming the authenticated user; default
	// {http.auth.user.id}. Behind forward_auth, name the header of the
	// auth service's answer: {http.reverse_proxy.header.Remote-User},
	// which is empty when no forward_auth ran. Any other placeholder is
	// refused at load (checkUIUser): a route that lost its forward_auth
	// would take a forged name for a user.
	User string `json:"user,omitempty"`
	// InsecureNoAuth serves requests with no authenticated user, as
	// "anonymous"; a warning is logged at start. Only for a page that
	// nobody else can reach.
	InsecureNoAuth bool `json:"insecure_no_auth,omitempty"`

	// ui is the page as checked at Provision, which says which paths
	// are its own; served is the page signing its forms with the key kept
	// in the store, built once the app has opened it.
	ui     *webui.UI
	app    *App
	served atomic.Pointer[webui.UI]
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
	if err := checkUIUser(u.User); err != nil {
		return fmt.Errorf("acme_proxy_ui: user: %w", err)
	}
	if p := strings.TrimSuffix(u.Prefix, "/"); p != "" {
		if err := acmeproxy.CheckPrefix(p); err != nil {
			return fmt.Errorf("acme_proxy_ui: prefix: %w", err)
		}
	}
	appMod, err := ctx.App("acme_proxy")
	if err != nil {
		return fmt.Errorf("%w: %w", errNoApp, err)
	}
	log := ctx.Logger()
	if u.InsecureNoAuth {
		log.Warn("acme_proxy_ui: insecure_no_auth is set: the operator page answers requests that nobody authenticated, "+
			"and can revoke certificates for them; put basic_auth, forward_auth or client certificates in front instead",
			zap.String("event", "ui_insecure_no_auth"))
	}
	user := u.User
	u.app = appMod.(*App)
	cfg := webui.Config{
		Operator: u.app.Operator(), Prefix: u.Prefix, InsecureNoAuth: u.InsecureNoAuth, Logger: log,
		User: func(r *http.Request) string {
			repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			if !ok {
				return ""
			}
			return repl.ReplaceAll(user, "")
		},
		Mount: strippedPrefix,
	}
	if u.ui, err = webui.New(cfg); err != nil {
		return err
	}
	// The forms' tokens are signed with a key kept in the database, so a
	// confirmation page served before a reload, or by another instance on
	// the same database, is still accepted. It is read (created on the
	// store's first start) once the app has opened the store: Provision
	// writes nothing.
	if err := u.app.whenOpen(ctx, func(ctx context.Context) error {
		csrfKey, err := u.app.db.Secret(ctx, "webui-csrf", 32, time.Now())
		if err != nil {
			return fmt.Errorf("acme_proxy_ui: %w", err)
		}
		cfg.CSRFKey = csrfKey
		served, err := webui.New(cfg)
		if err != nil {
			return err
		}
		u.served.Store(served)
		return nil
	}); err != nil {
		return err
	}
	log.Info("acme_proxy_ui mounted", zap.String("prefix", u.Prefix), zap.String("user", u.User))
	return nil
}

// checkUIUser takes a user placeholder only from the two sources that name
// someone who was authenticated: Caddy's authentication handlers
// ({http.auth.user.*}) and forward_auth's answer from the auth service
// ({http.reverse_proxy.header.*}, empty on a request no forward_auth
// handled). Anything else could name someone nobody authenticated: a
// literal or {env.…} (every request would be that user), what the client
// sent ({http.request.header.…}, cookies, the query, its TLS handshake's
// names — a client certificate signs in by itself once Caddy's TLS has
// verified it), or variables a route may have filled from either.
func checkUIUser(user string) error {
	name, ok := strings.CutPrefix(user, "{")
	name, closed := strings.CutSuffix(name, "}")
	if !ok || !closed || name == "" || strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%q is not one placeholder such as %s; a fixed name would sign in every request as that name", user, defaultUIUser)
	}
	for _, from := range uiUserSources {
		if strings.HasPrefix(name, from) && len(name) > len(from) {
			return nil
		}
	}
	return fmt.Errorf("%s names no one Caddy authenticated: use {http.auth.user.id} (basic_auth and other authentication handlers) "+
		"or, behind forward_auth, {http.reverse_proxy.header.<name>} of the auth service's answer; a placeholder of what the client sent "+
		"can be forged whenever nothing in front replaces it", user)
}

// strippedPrefix is the path a handler in front of the page stripped from
// r (handle_path /ops/*, uri strip_prefix): the original request's path
// less the path the page sees, when that is its tail. Under handle_path
// the page sees /orders for /ops/orders, and its links must say
// /ops/orders again. What is not a path of plain segments (a doubled
// slash would make a link "//host/…", another site) is not used.
func strippedPrefix(r *http.Request) string {
	orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if !ok || orig.URL == nil {
		return ""
	}
	mount, ok := strings.CutSuffix(orig.URL.EscapedPath(), r.URL.EscapedPath())
	if !ok || mount == "" || acmeproxy.CheckPrefix(mount) != nil {
		return ""
	}
	return mount
}

// uiUserSources are the placeholder prefixes checkUIUser takes.
var uiUserSources = []string{"http.auth.user.", "http.reverse_proxy.header."}

// ServeHTTP serves the pages and passes anything else on.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !u.ui.Handles(r.URL.Path) {
		return next.ServeHTTP(w, r)
	}
	// Bounded as the admin API's requests are: a database that does not
	// answer is a 503 page, not a page that never loads.
	ctx, cancel := context.WithTimeout(r.Context(), operator.RequestDeadline)
	defer cancel()
	// Before the app has opened the store, wait for it.
	u.app.awaitStart(ctx)
	served := u.served.Load()
	if served == nil {
		// The store not open (the app's start failed, or has not opened
		// it by the deadline): ask again later, as the admin API says.
		w.Header().Set("Retry-After", strconv.Itoa(int(operator.UnavailableRetryAfter/time.Second)))
		return caddyhttp.Error(http.StatusServiceUnavailable, errNoApp)
	}
	if trusted, _ := caddyhttp.GetVar(ctx, caddyhttp.TrustedProxyVarKey).(bool); trusted {
		// A page behind a front that terminates TLS: its Origin is the
		// front's scheme (checkPost).
		ctx = forwarded.FromTrustedProxy(r.WithContext(ctx))
	}
	served.ServeHTTP(w, r.WithContext(ctx))
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*UI)(nil)
	_ caddyhttp.MiddlewareHandler = (*UI)(nil)
)
