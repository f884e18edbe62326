package caddyfile

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterDirective("acme_proxy_challenges", parseChallenges)
	// Ahead of redir and of every handler that answers: an upstream's
	// http-01 request must reach it on port 80 before a redirect to HTTPS
	// or a site's content does.
	httpcaddyfile.RegisterDirectiveOrder("acme_proxy_challenges", httpcaddyfile.Before, "redir")
}

// parseChallenges reads the directive of http.handlers.acme_proxy_challenges,
// which takes no settings:
//
//	acme_proxy_challenges [<matcher>]
func parseChallenges(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	h.Next()
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	h.Next()
	if h.NextArg() {
		return nil, h.Errf("acme_proxy_challenges: unexpected argument %q; it takes none", h.Val())
	}
	if h.NextBlock(0) {
		return nil, h.Errf("acme_proxy_challenges: unexpected block; it takes no settings")
	}
	raw, err := json.Marshal(map[string]string{"handler": "acme_proxy_challenges"})
	if err != nil {
		return nil, err
	}
	route := caddyhttp.Route{HandlersRaw: []json.RawMessage{raw}}
	if matcherSet != nil {
		route.MatcherSetsRaw = []caddy.ModuleMap{matcherSet}
	}
	return []httpcaddyfile.ConfigValue{{Class: "route", Value: route}}, nil
}
