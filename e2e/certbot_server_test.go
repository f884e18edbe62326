//go:build unix

package e2e

import (
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// certbotSite is what a certbot test serves: one acme_proxy profile on
// https://localhost, validating http-01 at certbot's standalone port.
type certbotSite struct {
	profile string
	// global is added to the global acme_proxy-less options (a log block).
	global string
	// body is added inside the profile's acme_proxy block (eab, a signer).
	body string
	// env is added to Caddy's and certbot's environment.
	env []string
}

// certbotServer is a built Caddy serving a certbotSite, and the certbot
// run that talks to it.
type certbotServer struct {
	admin    string // Caddy's admin address
	proc     *caddyProc
	server   string // the profile's directory URL
	rootFile string // Caddy's local root, which its HTTPS site chains to
	root     *x509.Certificate
	// challengePort is where, on 127.0.0.1, the profile validates http-01
	// (certbot's standalone server, or the test's own for another client).
	challengePort int
	cb            certbotRun
}

// startCertbotServer starts caddy (a built binary) with site, on a SQLite
// file and a DNS server that answers for example.com, waits until the
// profile's directory answers, and readies certbot (bin) for it with its
// own directories.
func startCertbotServer(t *testing.T, caddy, certbot string, site certbotSite) certbotServer {
	t.Helper()
	dnsAddr := startDNS(t, "example.com")
	var (
		admin       = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		httpPort    = freePort(t)
		httpsPort   = freePort(t)
		certbotPort = freePort(t)
		home        = t.TempDir()
		storage     = t.TempDir()
		database    = filepath.Join(t.TempDir(), "acme.db")
	)
	config := fmt.Sprintf(`{
	admin %s
	default_bind 127.0.0.1
	http_port %d
	https_port %d
	local_certs
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	storage file_system %q
%s
	acme_proxy {
		database %q
	}
}

https://localhost:%d {
	acme_proxy {
		profile %s
		validation_ports {
			http %d
		}
		resolvers %s
%s
	}
}
`, admin, httpPort, httpsPort, storage, site.global, database, httpsPort, site.profile, certbotPort, dnsAddr, site.body)
	env := slices.Concat([]string{
		"HOME=" + home,
		"XDG_DATA_HOME=" + filepath.Join(home, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
	}, site.env)

	start := time.Now()
	s := certbotServer{admin: admin, proc: startCaddy(t, caddy, config, env), challengePort: certbotPort}
	s.server = fmt.Sprintf("https://localhost:%d/acme/%s/directory", httpsPort, site.profile)
	s.rootFile = filepath.Join(storage, "pki", "authorities", "local", "root.crt")
	s.root = waitDirectory(t, s.proc, s.server, s.rootFile, 15*time.Second)
	t.Logf("caddy answered %s after %s", s.server, time.Since(start).Round(time.Millisecond))
	s.cb = certbotRun{
		bin:       certbot,
		env:       slices.Concat(env, []string{"REQUESTS_CA_BUNDLE=" + s.rootFile}),
		configDir: t.TempDir(),
		workDir:   t.TempDir(),
		logsDir:   t.TempDir(),
		common: []string{
			"--non-interactive",
			"--server", s.server,
			"--http-01-port", fmt.Sprint(certbotPort),
			"--http-01-address", "127.0.0.1",
		},
	}
	return s
}
