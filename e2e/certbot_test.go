//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestCertbot has Debian's certbot get a certificate from the built caddy
// with http-01 (certbot's standalone server answering the challenge), then
// renew it.
func TestCertbot(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	caddy := buildCaddy(t)

	const name = "cb.example.com"
	dnsAddr := startDNS(t, "example.com")
	var (
		httpPort    = freePort(t)
		httpsPort   = freePort(t)
		certbotPort = freePort(t)
		home        = t.TempDir()
		storage     = t.TempDir()
		database    = filepath.Join(t.TempDir(), "acme.db")
	)
	config := fmt.Sprintf(`{
	admin off
	default_bind 127.0.0.1
	http_port %d
	https_port %d
	local_certs
	skip_install_trust
	storage file_system %q
	acme_proxy {
		database %q
	}
}

https://localhost:%d {
	acme_proxy {
		profile certbot
		validation_ports {
			http %d
		}
		resolvers %s
	}
}
`, httpPort, httpsPort, storage, database, httpsPort, certbotPort, dnsAddr)
	env := []string{
		"HOME=" + home,
		"XDG_DATA_HOME=" + filepath.Join(home, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
	}

	start := time.Now()
	proc := startCaddy(t, caddy, config, env)
	server := fmt.Sprintf("https://localhost:%d/acme/certbot/directory", httpsPort)
	rootFile := filepath.Join(storage, "pki", "authorities", "local", "root.crt")
	root := waitDirectory(t, proc, server, rootFile, 15*time.Second)
	t.Logf("caddy answered %s after %s", server, time.Since(start).Round(time.Millisecond))

	cb := certbotRun{
		bin:       certbot,
		env:       slices.Concat(env, []string{"REQUESTS_CA_BUNDLE=" + rootFile}),
		configDir: t.TempDir(),
		workDir:   t.TempDir(),
		logsDir:   t.TempDir(),
		common: []string{
			"--non-interactive",
			"--server", server,
			"--http-01-port", fmt.Sprint(certbotPort),
			"--http-01-address", "127.0.0.1",
		},
	}
	live := filepath.Join(cb.configDir, "live", name)

	cb.run(t, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", name)
	first := checkCertbotCert(t, live, root, name)

	cb.run(t, "renew", "--force-renewal", "--no-random-sleep-on-renew", "--cert-name", name)
	second := checkCertbotCert(t, live, root, name)
	if first.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Errorf("renewal kept serial %x; want a new certificate", first.SerialNumber)
	}
	if bytes.Equal(first.Raw, second.Raw) {
		t.Errorf("renewal left the certificate unchanged")
	}
}

// certbotRun runs certbot with its own directories and the flags every
// command shares.
type certbotRun struct {
	bin                         string
	env                         []string // added to the test's environment
	configDir, workDir, logsDir string
	common                      []string
}

// run runs `certbot <args>` with c's directories and common flags, and
// fails the test, with certbot's output and log, unless it exits 0.
func (c certbotRun) run(t *testing.T, args ...string) {
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
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		logFile := filepath.Join(c.logsDir, "letsencrypt.log")
		log, lerr := os.ReadFile(logFile)
		if lerr != nil {
			log = []byte(lerr.Error())
		}
		t.Fatalf("certbot %s: %v\noutput:\n%s\n%s:\n%s", args[0], err, out, logFile, log)
	}
	t.Logf("certbot %s took %s", args[0], time.Since(start).Round(time.Millisecond))
}

// checkCertbotCert checks what certbot saved under live: a full chain
// that verifies up to root for name and names exactly name, and a
// private key that matches it. It returns the leaf.
func checkCertbotCert(t *testing.T, live string, root *x509.Certificate, name string) *x509.Certificate {
	t.Helper()
	fullchain := filepath.Join(live, "fullchain.pem")
	chain, err := readCerts(fullchain)
	if err != nil {
		t.Fatalf("certbot's certificate: %v", err)
	}
	leaf := chain[0]
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		DNSName:       name,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Fatalf("%s does not verify up to caddy's local root for %s: %v", fullchain, name, err)
	}
	if !slices.Equal(leaf.DNSNames, []string{name}) || len(leaf.IPAddresses)+len(leaf.EmailAddresses)+len(leaf.URIs) != 0 {
		t.Errorf("%s names DNS %q, IP %v, email %q, URI %v; want exactly DNS %q",
			fullchain, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, leaf.URIs, name)
	}
	if _, err := tls.LoadX509KeyPair(fullchain, filepath.Join(live, "privkey.pem")); err != nil {
		t.Errorf("certbot's key and certificate: %v", err)
	}
	if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		t.Errorf("%s is valid %s to %s, not now (%s)", fullchain, leaf.NotBefore, leaf.NotAfter, now)
	}
	return leaf
}
