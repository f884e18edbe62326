package caddyacmeproxy

import (
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/acmeproxy/caddy-acme-proxy/signer/relay"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Challenges is http.handlers.acme_proxy_challenges: it answers the
// upstream CA's http-01 requests (GET /.well-known/acme-challenge/<token>)
// for the relay signers of every instance on the acme_proxy app's
// database, so that whichever instance the upstream reaches answers, and
// instances need not share Caddy storage. Anything else goes to the next
// handler.
//
// Caddy's HTTP servers hand such requests to the tls app first, which
// answers the challenges in this instance's Caddy storage (where the relay
// writes them too); what it does not know falls through to the routes,
// and so to this handler. Mount it on the site that serves port 80 for
// the names the relay's clients ask for, typically `http:// { … }`.
type Challenges struct {
	app *App
	db  *store.DB
}

// CaddyModule returns the Caddy module information.
func (*Challenges) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.acme_proxy_challenges", New: func() caddy.Module { return new(Challenges) }}
}

// Provision finds the acme_proxy app's store.
func (c *Challenges) Provision(ctx caddy.Context) error {
	appMod, err := ctx.App("acme_proxy")
	if err != nil {
		return fmt.Errorf("%w: %w", errNoApp, err)
	}
	c.app = appMod.(*App)
	c.db = c.app.db
	return nil
}

// ServeHTTP answers a published challenge and passes anything else on.
func (c *Challenges) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// Before the app has opened the store the read waits for it (and
	// fails, 503, if the app stopped without).
	c.app.awaitStart(r.Context())
	answered, err := relay.ServeHTTPChallenge(w, r, c.db, time.Now())
	if err != nil {
		return caddyhttp.Error(http.StatusServiceUnavailable, fmt.Errorf("reading the upstream http-01 challenges: %w", err))
	}
	if answered {
		return nil
	}
	return next.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Challenges)(nil)
	_ caddyhttp.MiddlewareHandler = (*Challenges)(nil)
)
