package caddyfile_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	// The signer modules the fixtures name (local_ca, relay) register
	// themselves with the root package.
	_ "github.com/acmeproxy/caddy-acme-proxy"
)

// stubSigner stands in for a signer added later (a script signer, a
// vault signer): a module of the acme_proxy.signers namespace that reads
// its own block, registered without touching this package.
type stubSigner struct {
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
}

func (stubSigner) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "acme_proxy.signers.acmeproxytest", New: func() caddy.Module { return new(stubSigner) }}
}

func (s *stubSigner) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the signer's name
	for d.NextBlock(0) {
		if d.Val() != "command" || !d.NextArg() {
			return d.Errf("stub signer: unexpected %q", d.Val())
		}
		s.Command = d.Val()
		s.Args = d.RemainingArgs()
	}
	return nil
}

func init() { caddy.RegisterModule(stubSigner{}) }

func TestASignerOfAnyRegisteredModuleReadsItsOwnBlock(t *testing.T) {
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(
		"https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tsigner acmeproxytest {\n\t\t\tcommand /usr/local/bin/sign --pem\n\t\t}\n\t}\n}\n"), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var doc any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	handlers := acmeProxyHandlers(doc)
	if len(handlers) != 1 {
		t.Fatalf("%d acme_proxy handlers, want 1:\n%s", len(handlers), out)
	}
	got, err := json.Marshal(handlers[0]["signer"])
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"args":["--pem"],"command":"/usr/local/bin/sign","module":"acmeproxytest"}`
	if string(got) != want {
		t.Errorf("signer JSON %s, want %s", got, want)
	}
}

func TestAnUnknownSignerErrorListsTheRegisteredSigners(t *testing.T) {
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(
		"https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tsigner vault\n\t}\n}\n"), nil)
	const want = `acme_proxy: signer: unknown signer "vault" (want acmeproxytest, delegated, local_ca, relay, script)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v\nwant one containing %q", err, want)
	}
}

func TestTheDelegatedSignerTakesNoSettings(t *testing.T) {
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(
		"https://ca.example.test {\n\tacme_proxy {\n\t\tprofile a\n\t\tsigner delegated {\n\t\t\tkey /etc/ca.key\n\t\t}\n\t}\n}\n"), nil)
	const want = `acme_proxy: signer delegated: unknown setting "key" (it has none)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v\nwant one containing %q", err, want)
	}
}
