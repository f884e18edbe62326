package caddyacmeproxy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy"
)

// mountedHandler is an acme_proxy handler as a server's routes hold it:
// its profile, its prefix (defaults applied), the top-level route it is
// in, and whether a matcher stands between it and the top of that route
// (guarded) or on that route itself (routeGuarded).
type mountedHandler struct {
	profile, prefix string
	route           int
	guarded         bool
	routeGuarded    bool
}

// checkReachable refuses a handler that another acme_proxy handler before
// it, in the server it is mounted in, leaves unreachable: a handler
// answers every path under its prefix, so one whose prefix is the
// other's, or lies under it, would never see a request (two profiles
// mounted at /acme, or /acme then /acme/a). Handlers run in the order
// written, not by the longest prefix, so this is the operator's mistake,
// caught at load rather than found as a profile that answers nothing. A
// matcher before the earlier handler (another site's host, a handle
// block's path) takes the pair out of the check: the operator has said
// which requests reach which handler.
//
// The routes are read from the server being provisioned (Caddy passes it
// in the context as caddyhttp.ServerCtxKey). Caddy provisions a server's
// routes in order and keeps a route's handler JSON until all its handlers
// are provisioned, so the route holding this handler and every route
// after it are still JSON here: this handler is checked against those,
// and an earlier route's handlers were checked against this one when
// they were provisioned. The error routes (handle_errors) are a chain of
// their own. Without a server in the context (a handler provisioned
// outside an HTTP app) there is nothing to compare with.
func checkReachable(ctx caddy.Context, profile string) error {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return nil
	}
	chains := []caddyhttp.RouteList{srv.Routes}
	if srv.Errors != nil {
		chains = append(chains, srv.Errors.Routes)
	}
	for _, routes := range chains {
		var hs []mountedHandler
		for i, r := range routes {
			n := len(hs)
			collectMounted(r.HandlersRaw, false, &hs)
			for k := n; k < len(hs); k++ {
				hs[k].route = i
				hs[k].routeGuarded = len(r.MatcherSetsRaw) > 0 || len(r.MatcherSets) > 0
			}
		}
		if holdsProfile(hs, profile) {
			return checkShadowing(hs)
		}
	}
	return nil
}

// holdsProfile reports whether hs mounts profile.
func holdsProfile(hs []mountedHandler, profile string) bool {
	for _, h := range hs {
		if h.profile == profile {
			return true
		}
	}
	return false
}

// checkShadowing returns the first pair of hs (in the order requests meet
// them) whose earlier handler, reached by every request that reaches the
// later one (no matcher above it but the top-level route they share),
// answers the later one's whole prefix, or the paths of some of
// its endpoints (an earlier /acme/order takes the orders of a later
// /acme). Two handlers of one profile are left to App.register, which
// says so.
func checkShadowing(hs []mountedHandler) error {
	endpoints := acmeproxy.EndpointSegments()
	for j, later := range hs {
		for _, earlier := range hs[:j] {
			if earlier.guarded || earlier.profile == later.profile || (earlier.route != later.route && earlier.routeGuarded) {
				continue
			}
			if later.prefix == earlier.prefix || strings.HasPrefix(later.prefix, earlier.prefix+"/") {
				return fmt.Errorf("prefix: profile %q (prefix %s) would never be reached: profile %q (prefix %s) comes before it and answers every path under %s; give them prefixes that do not nest, or put the one with the longer prefix first",
					later.profile, later.prefix, earlier.profile, earlier.prefix, earlier.prefix)
			}
			below, ok := strings.CutPrefix(earlier.prefix, later.prefix+"/")
			if !ok {
				continue
			}
			if seg, _, _ := strings.Cut(below, "/"); slices.Contains(endpoints, seg) {
				return fmt.Errorf("prefix: profile %q (prefix %s) comes before profile %q (prefix %s) and takes its %s endpoints (%s/%s…); give %q a prefix below no endpoint of %q",
					earlier.profile, earlier.prefix, later.profile, later.prefix, seg, later.prefix, seg, earlier.profile, later.profile)
			}
		}
	}
	return nil
}

// collectMounted appends the acme_proxy handlers among handlers (a
// route's handler JSON), in the order requests meet them, descending into
// subroutes; guarded says a matcher stands above them. JSON that does not
// decode is skipped: its own module's provisioning reports it.
func collectMounted(handlers []json.RawMessage, guarded bool, out *[]mountedHandler) {
	for _, raw := range handlers {
		var kind struct {
			Handler string `json:"handler"`
		}
		if json.Unmarshal(raw, &kind) != nil {
			continue
		}
		switch kind.Handler {
		case "acme_proxy":
			var cfg acmeproxy.ProfileConfig
			var names struct {
				Profile string `json:"profile"`
				Prefix  string `json:"prefix"`
			}
			if json.Unmarshal(raw, &names) != nil || names.Profile == "" {
				continue
			}
			cfg.Profile, cfg.Prefix = names.Profile, names.Prefix
			cfg.SetDefaults()
			*out = append(*out, mountedHandler{profile: cfg.Profile, prefix: cfg.Prefix, guarded: guarded})
		case "subroute":
			var sub struct {
				Routes []struct {
					Match  []json.RawMessage `json:"match"`
					Handle []json.RawMessage `json:"handle"`
				} `json:"routes"`
			}
			if json.Unmarshal(raw, &sub) != nil {
				continue
			}
			for _, r := range sub.Routes {
				collectMounted(r.Handle, guarded || len(r.Match) > 0, out)
			}
		}
	}
}
