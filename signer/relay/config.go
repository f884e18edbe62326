package relay

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
)

// Challenge strategies: how the relay proves control of a name upstream.
const (
	// ChallengeDNS01 answers the upstream's dns-01 challenge through a
	// libdns provider (any Caddy dns.providers.* module).
	ChallengeDNS01 = "dns01"
	// ChallengeHTTP01 answers the upstream's http-01 challenge through
	// Caddy's own HTTP challenge handling, from Caddy storage, so any
	// instance sharing the storage can answer it.
	ChallengeHTTP01 = "http01"
	// ChallengeBypass triggers the first challenge the upstream offers
	// without presenting anything, for upstreams that trust the account.
	ChallengeBypass = "bypass"
)

// Config is the JSON of the relay signer.
type Config struct {
	// Directory is the upstream ACME directory URL. Required.
	Directory string `json:"directory"`
	// Email is the upstream account's contact, if any.
	Email string `json:"email,omitempty"`
	// EAB binds the upstream account to an account the upstream CA already
	// knows (RFC 8555 §7.3.4), for CAs that require it.
	EAB *EAB `json:"eab,omitempty"`
	// TrustedRoots is a PEM file of the roots the upstream's TLS
	// certificate must chain to, instead of the system's (a private
	// upstream: step-ca, Pebble).
	TrustedRoots string `json:"trusted_roots,omitempty"`
	// Challenge is the strategy: dns01, http01 or bypass. Default dns01
	// when DNS is set, else http01.
	Challenge string `json:"challenge,omitempty"`
	// DNSRaw is the dns.providers.* module that writes dns-01 records.
	DNSRaw json.RawMessage `json:"dns,omitempty" caddy:"namespace=dns.providers inline_key=name"`
	// PropagationTimeout bounds the wait for a dns-01 record to appear on
	// the zone's authoritative servers; -1 skips the check. Default 2m.
	PropagationTimeout caddy.Duration `json:"propagation_timeout,omitempty"`
	// PropagationDelay is waited before checking propagation.
	PropagationDelay caddy.Duration `json:"propagation_delay,omitempty"`
	// Resolvers are the DNS servers used to find a name's zone and check
	// propagation; default the system's.
	Resolvers []string `json:"resolvers,omitempty"`
	// PrepareUpstream is "on" to place the upstream order and answer its
	// challenges while the client proves its names, before it finalizes
	// (Options.PrepareUpstream); "off" (the default) waits for finalize.
	PrepareUpstream string `json:"prepare_upstream,omitempty"`
}

// EAB is an external account binding's key id and base64url HMAC key.
type EAB struct {
	KeyID  string `json:"key_id"`
	MACKey string `json:"mac_key"`
}
