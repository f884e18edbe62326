//go:build unix

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The README's one-machine walk-through, as the README writes it; the test
// checks that the README still says this and runs it.
const (
	walkQuickstart = "go run ./cmd/caddy run --adapter caddyfile --config examples/quickstart.Caddyfile"
	walkRoot       = "root=$HOME/.local/share/caddy/pki/authorities/local/root.crt"
	walkDirectory  = "https://localhost:8443/acme/internal/directory"
	walkCertbot    = `sudo env REQUESTS_CA_BUNDLE="$root" certbot certonly --standalone --server ` + walkDirectory +
		" --agree-tos --register-unsafely-without-email -d "
	walkVerify = `sudo openssl verify -CAfile "$root" -untrusted /etc/letsencrypt/live/localhost/chain.pem /etc/letsencrypt/live/localhost/cert.pem`
	walkHosts  = `echo '127.0.0.1 nas' | sudo tee -a /etc/hosts`
	walkRenew  = `sudo env REQUESTS_CA_BUNDLE="$root" certbot renew`
	walkOrders = "go run ./cmd/caddy acme-proxy orders"
)

// walkHostsName is the single-label name the test adds to /etc/hosts in
// place of the README's "nas", which a machine may already know.
const walkHostsName = "acmeproxy-walkthrough"

// TestTheREADMEWalkThroughIssuesForLocalhostAndANameInEtcHosts runs the
// README's walk-through on this machine: the quickstart Caddyfile of
// examples/ as it is (only HOME points at a temporary directory), then
// certbot --standalone on port 80, trusting Caddy's root, for localhost
// and for a name added to /etc/hosts.
func TestTheREADMEWalkThroughIssuesForLocalhostAndANameInEtcHosts(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := shellText(string(readme))
	for _, cmd := range []string{walkQuickstart, walkRoot, walkCertbot + "localhost", walkVerify, walkHosts, walkCertbot + "nas", walkRenew, walkOrders} {
		if !strings.Contains(said, cmd) {
			t.Errorf("the README's walk-through no longer says\n\t%s\nchange the README and this test together", cmd)
		}
	}
	if t.Failed() {
		return
	}

	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	openssl := needTool(t, "openssl", "install it with `apt-get install --no-install-recommends openssl`")
	// The quickstart's ports, and port 80 for certbot: the walk-through
	// runs on them, so they must be free.
	for _, addr := range []string{":80", "127.0.0.1:8443", "127.0.0.1:2019"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			needEnvironment(t, fmt.Sprintf("the walk-through needs %s free and bindable (certbot --standalone binds port 80 as root; the quickstart listens on 8443, its admin endpoint on 2019): %v", addr, err))
		}
		ln.Close()
	}
	// Before Caddy starts, so that its resolver does not hold a copy of
	// /etc/hosts from before the name was added.
	hostsErr := addHostsLine(t, "127.0.0.1 "+walkHostsName+" # added by caddy-acme-proxy's e2e walk-through test; safe to delete")

	caddy := buildCaddy(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	// HOME alone places Caddy's data as on a fresh machine: ~/.local/share/caddy.
	env := []string{"HOME=" + home, "XDG_DATA_HOME=", "XDG_CONFIG_HOME="}
	proc := startCaddyIn(t, caddy, repo, "examples/quickstart.Caddyfile", env)
	rootFile := filepath.Join(home, ".local", "share", "caddy", "pki", "authorities", "local", "root.crt")
	root := waitDirectory(t, proc, walkDirectory, rootFile, 20*time.Second)

	// The point of the quickstart's `auto_https disable_redirects`: port 80
	// stays free for certbot.
	if ln, err := net.Listen("tcp", ":80"); err != nil {
		t.Fatalf("with the quickstart running, port 80 cannot be bound (%v): certbot --standalone could not answer http-01", err)
	} else {
		ln.Close()
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "share", "caddy", "acme_proxy", "acme_proxy.db")); err != nil {
		t.Errorf("the database is not where the README says: %v", err)
	}

	cb := certbotRun{
		bin:       certbot,
		env:       slices.Concat(env, []string{"REQUESTS_CA_BUNDLE=" + rootFile}),
		configDir: t.TempDir(), // the README's run uses /etc/letsencrypt
		workDir:   t.TempDir(),
		logsDir:   t.TempDir(),
		common:    []string{"--non-interactive"}, // a prompt fails the test instead of waiting
	}
	// check checks name's certificate as certbot saved it, and as openssl
	// verifies it against Caddy's root, and returns its serial (hex).
	check := func(t *testing.T, name string) string {
		t.Helper()
		live := filepath.Join(cb.configDir, "live", name)
		leaf := checkCertbotCert(t, live, root, name)
		out, err := exec.Command(openssl, "verify", "-CAfile", rootFile,
			"-untrusted", filepath.Join(live, "chain.pem"), filepath.Join(live, "cert.pem")).CombinedOutput()
		if err != nil || !bytes.HasSuffix(bytes.TrimSpace(out), []byte(": OK")) {
			t.Errorf("openssl verify of %s's certificate against Caddy's root: %v\n%s", name, err, out)
		}
		return leaf.SerialNumber.Text(16)
	}
	serials := map[string]string{} // name → serial, of each certificate issued
	certonly := func(t *testing.T, name string) {
		t.Helper()
		cb.run(t, "certonly", "--standalone", "--server", walkDirectory, "--agree-tos", "--register-unsafely-without-email", "-d", name)
		serials[name] = check(t, name)
	}

	t.Run("localhost", func(t *testing.T) { certonly(t, "localhost") })
	// The quickstart names no acme_proxy app (its handler pulls it in);
	// the operator's CLI (walkOrders, the built binary in place of go run)
	// still reaches it through the admin endpoint.
	t.Run("the CLI lists the order", func(t *testing.T) {
		out, err := exec.Command(caddy, "acme-proxy", "orders").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("localhost")) {
			t.Fatalf("caddy acme-proxy orders: %v\n%s", err, out)
		}
	})
	t.Run("a name in /etc/hosts", func(t *testing.T) {
		if hostsErr != nil {
			needEnvironment(t, fmt.Sprintf("this case adds a line to /etc/hosts, which this user cannot write: %v", hostsErr))
		}
		certonly(t, walkHostsName)
	})
	t.Run("renew", func(t *testing.T) {
		if len(serials) == 0 {
			t.Fatal("no certificate to renew")
		}
		// The 7-day certificates are inside certbot's 30-day renewal window.
		// Without a terminal certbot would first sleep up to 8 minutes.
		cb.run(t, "renew", "--no-random-sleep-on-renew")
		for name, before := range serials {
			if after := check(t, name); after == before {
				t.Errorf("certbot renew left %s's certificate (serial %s) as it was", name, before)
			}
		}
	})
}

// needEnvironment skips the test with msg, or fails it when ACMEPROXY_E2E=1
// says the environment must allow what it needs.
func needEnvironment(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatalf("%s; ACMEPROXY_E2E=1 requires it", msg)
	}
	t.Skipf("skipping: %s (with ACMEPROXY_E2E=1 this fails instead)", msg)
}

// shellText is text with each shell line continuation joined and each run
// of blanks made one space, so that commands compare whatever their layout.
func shellText(text string) string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	return regexp.MustCompile(`[ \t]+`).ReplaceAllString(text, " ")
}

// hostsFile is the file addHostsLine edits.
const hostsFile = "/etc/hosts"

// addHostsLine appends line to /etc/hosts and, on cleanup, takes it out
// again, leaving whatever else changed meanwhile. It returns why it could
// not, as when the test does not run as root.
func addHostsLine(t *testing.T, line string) error {
	t.Helper()
	// Registered first, so run last: after the line's removal.
	t.Cleanup(func() {
		if now, err := os.ReadFile(hostsFile); err == nil && bytes.Contains(now, []byte(line)) {
			t.Errorf("%s still has the line %q after the test", hostsFile, line)
		}
	})
	before, err := os.ReadFile(hostsFile)
	if err != nil {
		return err
	}
	added := line + "\n"
	if len(before) > 0 && !bytes.HasSuffix(before, []byte("\n")) {
		added = "\n" + added
	}
	f, err := os.OpenFile(hostsFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(added)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	t.Cleanup(func() {
		if err := removeHostsLine(added); err != nil {
			t.Errorf("restoring %s: %v; delete the line %q by hand", hostsFile, err, line)
		}
	})
	return err
}

// removeHostsLine takes the text addHostsLine appended out of /etc/hosts,
// writing the file in place (it is often a bind mount, which a rename
// cannot replace).
func removeHostsLine(added string) error {
	now, err := os.ReadFile(hostsFile)
	if err != nil {
		return err
	}
	i := bytes.LastIndex(now, []byte(added))
	if i < 0 {
		return errors.New("the line is not there any more")
	}
	restored := slices.Concat(now[:i], now[i+len(added):])
	f, err := os.OpenFile(hostsFile, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(restored)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var check []byte
		if check, err = os.ReadFile(hostsFile); err == nil && !bytes.Equal(check, restored) {
			err = fmt.Errorf("%s reads back differently", hostsFile)
		}
	}
	return err
}
