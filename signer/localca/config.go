package localca

import "github.com/caddyserver/caddy/v2"

// Config is the JSON of the local_ca signer.
type Config struct {
	// CA is the id of a CA in Caddy's pki app; default "local". Ignored
	// when Cert and Key are set.
	CA string `json:"ca,omitempty"`
	// Cert and Key are PEM files of an issuing CA (Cert may hold the chain
	// above it too), used instead of a Caddy pki CA.
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// Lifetime of issued leaves; default 7 days.
	Lifetime caddy.Duration `json:"lifetime,omitempty"`
}
