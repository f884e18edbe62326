package caddyacmeproxy

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	apcaddyfile "github.com/acmeproxy/caddy-acme-proxy/caddyfile"
	"github.com/acmeproxy/caddy-acme-proxy/signer/delegated"
)

// Delegated is acme_proxy.signers.delegated: the profile is served here
// without its signer, which holds nothing — no CA key, no upstream
// account, no script. Signing is delegated to the instances that mount
// the same profile, on the same store, with its real signer: a finalized
// order answers processing and waits for one of them to claim its
// signer_issue job; ca.pem, the CRLs and the revocation route are what
// they publish in the store. It has no settings.
//
// (The name says what this instance does with the profile's signing —
// hands it on — rather than where the signer is; "remote" or "elsewhere"
// would suggest a network peer to configure, and there is none: the
// shared store is the only link.)
type Delegated struct {
	*delegated.Signer `json:"-"`
}

// CaddyModule returns the Caddy module information.
func (*Delegated) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "acme_proxy.signers.delegated", New: func() caddy.Module { return &Delegated{Signer: new(delegated.Signer)} }}
}

// UnmarshalCaddyfile reads `signer delegated`, which takes no block.
func (g *Delegated) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := apcaddyfile.StartSigner(d); err != nil {
		return err
	}
	if d.NextBlock(0) {
		return d.Errf("acme_proxy: signer delegated: unknown setting %q (it has none)", d.Val())
	}
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Delegated)(nil)
