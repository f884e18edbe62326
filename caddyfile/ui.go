package caddyfile

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterDirective("acme_proxy_ui", parseUI)
	// Like acme_proxy: after the authentication handlers (basic_auth,
	// forward_auth), which must run first, and ahead of the routing
	// blocks and the handlers that answer everything.
	httpcaddyfile.RegisterDirectiveOrder("acme_proxy_ui", httpcaddyfile.Before, "invoke")
}

// uiJSON is the JSON of http.handlers.acme_proxy_ui.
type uiJSON struct {
	Handler        string `json:"handler"`
	Prefix         string `json:"prefix,omitempty"`
	User           string `json:"user,omitempty"`
	InsecureNoAuth bool   `json:"insecure_no_auth,omitempty"`
}

// parseUI reads the operator page's directive:
//
//	acme_proxy_ui [<matcher>] {
//		prefix <path>            (default /)
//		user <placeholder>       (default {http.auth.user.id})
//		insecure_no_auth         (serve requests nobody authenticated)
//	}
func parseUI(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	h.Next()
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	h.Next()
	if h.NextArg() {
		return nil, h.Errf("acme_proxy_ui: unexpected argument %q; settings go in a block", h.Val())
	}
	cfg := uiJSON{Handler: "acme_proxy_ui"}
	for h.NextBlock(0) {
		switch key := h.Val(); key {
		case "prefix":
			cfg.Prefix, err = uiArg(h, key)
		case "user":
			cfg.User, err = uiArg(h, key)
		case "insecure_no_auth":
			if h.NextArg() {
				err = h.Errf("acme_proxy_ui: insecure_no_auth: takes no value")
			}
			cfg.InsecureNoAuth = true
		default:
			err = h.Errf("acme_proxy_ui: unknown subdirective %q", key)
		}
		if err != nil {
			return nil, err
		}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	route := caddyhttp.Route{HandlersRaw: []json.RawMessage{raw}}
	if matcherSet != nil {
		route.MatcherSetsRaw = []caddy.ModuleMap{matcherSet}
	}
	return []httpcaddyfile.ConfigValue{{Class: "route", Value: route}}, nil
}

// uiArg reads the single value of key.
func uiArg(h httpcaddyfile.Helper, key string) (string, error) {
	args := h.RemainingArgs()
	if len(args) != 1 {
		return "", h.Errf("acme_proxy_ui: %s: want one value, got %d", key, len(args))
	}
	return args[0], nil
}
