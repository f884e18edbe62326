// Package caddyacmeproxy is the Caddy glue of caddy-acme-proxy: it
// registers the acme_proxy app, the http.handlers.acme_proxy handler and the
// signer modules, and turns their JSON config into the acmeproxy, jobs,
// signer and store packages, which hold all the logic.
package caddyacmeproxy

import (
	"github.com/caddyserver/caddy/v2"

	// The Caddyfile directive and global option register themselves.
	_ "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
)

func init() {
	caddy.RegisterModule(new(App))
	caddy.RegisterModule(new(Handler))
	caddy.RegisterModule(new(LocalCA))
	caddy.RegisterModule(new(Relay))
	caddy.RegisterModule(new(Script))
	caddy.RegisterModule(new(Delegated))
	caddy.RegisterModule(new(AdminAPI))
	caddy.RegisterModule(new(UI))
	caddy.RegisterModule(new(Challenges))
}
