//go:build unix

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCertbotRegistersOnlyWithAnOperatorMintedBinding has Debian's certbot
// (2.1: --eab-kid, --eab-hmac-key) register at a profile with `eab
// required`: without a binding it is refused, with a wrong MAC key too,
// and with a key minted by `caddy acme-proxy eab create` it registers and
// obtains a certificate. The MAC key appears nowhere in Caddy's log.
func TestCertbotRegistersOnlyWithAnOperatorMintedBinding(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	caddy := buildCaddy(t)

	const name = "eab.example.com"
	s := startCertbotServer(t, caddy, certbot, certbotSite{
		profile: "bound",
		global:  "\tlog {\n\t\tlevel DEBUG\n\t}",
		body:    "\t\teab required",
	})
	admin, proc, root, cb := s.admin, s.proc, s.root, s.cb
	obtain := []string{"certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", name}

	// Without a binding: the directory says externalAccountRequired, and
	// certbot stops before registering.
	if out, err := cb.attempt(t, obtain...); err == nil || !strings.Contains(out, "external account binding") {
		t.Fatalf("certbot without a binding: %v\n%s\nwant a refusal naming the external account binding", err, out)
	}

	var key struct {
		KID     string `json:"kid"`
		HMACKey string `json:"hmac_key"`
	}
	out, err := exec.Command(caddy, "acme-proxy", "eab", "create", "--profile", "bound", "--label", "certbot-hosts",
		"--json", "--address", admin).CombinedOutput()
	if err != nil || json.Unmarshal(out, &key) != nil || key.KID == "" || key.HMACKey == "" {
		t.Fatalf("caddy acme-proxy eab create: %v\n%s", err, out)
	}

	// The right key id with another MAC key: the server refuses the binding.
	wrong := base64.RawURLEncoding.EncodeToString([]byte("not the key the operator minted!"))
	if out, err := cb.attempt(t, slices.Concat(obtain, []string{"--eab-kid", key.KID, "--eab-hmac-key", wrong})...); err == nil ||
		!strings.Contains(out, "MAC does not verify") {
		t.Fatalf("certbot with a wrong MAC key: %v\n%s\nwant the server's refusal of the MAC", err, out)
	}

	// The minted key: registered, and the certificate issued.
	cb.run(t, slices.Concat(obtain, []string{"--eab-kid", key.KID, "--eab-hmac-key", key.HMACKey})...)
	checkCertbotCert(t, filepath.Join(cb.configDir, "live", name), root, name)

	out, err = exec.Command(caddy, "acme-proxy", "accounts", "--profile", "bound", "--address", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "certbot-hosts") {
		t.Errorf("caddy acme-proxy accounts: %v\n%s\nwant the account labelled certbot-hosts", err, out)
	}

	// Caddy's log (DEBUG) saw the binding — its key id — but never its MAC
	// key, in either encoding.
	logs := proc.out.String()
	if !strings.Contains(logs, key.KID) {
		t.Fatalf("Caddy's log never names the key id %s: the log was not captured", key.KID)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(key.HMACKey)
	for what, secret := range map[string]string{
		"base64url":           key.HMACKey,
		"standard base64":     base64.StdEncoding.EncodeToString(raw),
		"the wrong base64url": wrong,
	} {
		if strings.Contains(logs, secret) {
			t.Errorf("Caddy's log holds the MAC key (%s)", what)
		}
	}
}

// attempt runs `certbot <args>` like run, but returns its output and
// error instead of failing the test.
func (c certbotRun) attempt(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	args = slices.Concat(args, []string{
		"--config-dir", c.configDir,
		"--work-dir", c.workDir,
		"--logs-dir", c.logsDir,
	}, c.common)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	inOwnGroup(cmd)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
