// Command caddy is Caddy with its standard modules and caddy-acme-proxy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/acmeproxy/caddy-acme-proxy"
)

func main() {
	caddycmd.Main()
}
