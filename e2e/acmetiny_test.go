//go:build unix

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAcmeTinyIssuesWithACommonNameOnlyCSRAndAgainWithTheSameAccount has
// Debian's acme-tiny — the 200-line Python client that signs with the
// openssl command and is run from cron with an account key and a CSR the
// operator made — get a certificate with http-01 (writing its tokens into
// the directory the host's web server serves), for a CSR made as its
// README makes one: the name in the subject's common name only, no
// subjectAltName, which RFC 8555 §7.4 allows. Run again, as cron does, it
// finds its account by its key and gets a new certificate.
func TestAcmeTinyIssuesWithACommonNameOnlyCSRAndAgainWithTheSameAccount(t *testing.T) {
	acmeTiny := needTool(t, "acme-tiny", "install it with `apt-get install --no-install-recommends acme-tiny`")
	openssl := needTool(t, "openssl", "install it with `apt-get install --no-install-recommends openssl`")
	caddy := buildCaddy(t)

	const name = "tiny.example.com"
	s := startCertbotServer(t, caddy, "", certbotSite{profile: "acmetiny"})
	dir := t.TempDir()
	acmeDir := filepath.Join(dir, "acme-challenge")
	serveWellKnown(t, acmeDir, s.challengePort)
	accountKey, domainKey, csr := filepath.Join(dir, "account.key"), filepath.Join(dir, "domain.key"), filepath.Join(dir, "domain.csr")
	for _, args := range [][]string{
		{"genrsa", "-out", accountKey, "2048"},
		{"genrsa", "-out", domainKey, "2048"},
		{"req", "-new", "-sha256", "-key", domainKey, "-subj", "/CN=" + name, "-out", csr},
	} {
		if out, err := exec.Command(openssl, args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	chain := filepath.Join(dir, "signed_chain.crt")
	// run runs acme-tiny, saves the chain it prints and returns what it
	// logged.
	run := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		// Its self-check GETs http://<name>/.well-known/acme-challenge/
		// through this machine's resolver, which does not know the test's
		// names (the server resolves them through the test's DNS server):
		// --disable-check, as on a host whose name resolves elsewhere.
		cmd := exec.CommandContext(ctx, acmeTiny, "--account-key", accountKey, "--csr", csr, "--acme-dir", acmeDir,
			"--directory-url", s.server, "--contact", "mailto:ops@example.com", "--disable-check")
		// Python's ssl module trusts what OpenSSL's SSL_CERT_FILE names.
		cmd.Env = append(os.Environ(), "HOME="+dir, "SSL_CERT_FILE="+s.rootFile)
		inOwnGroup(cmd)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("acme-tiny: %v\n%s", err, stderr.String())
		}
		if err := os.WriteFile(chain, out, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Logf("acme-tiny took %s", time.Since(start).Round(time.Millisecond))
		return stderr.String()
	}

	log := run()
	first := checkIssued(t, chain, domainKey, s.root, name)

	account := regexp.MustCompile(`(?m)^Registered! Account ID: (\S+)$`).FindStringSubmatch(log)
	if account == nil {
		t.Fatalf("acme-tiny's first run did not register a new account (201):\n%s", log)
	}
	// RFC 8555 §7.3.1: a newAccount for a known key answers 200 with its
	// Location, which acme-tiny reports as already registered.
	if log := run(); !strings.Contains(log, "\nAlready registered! Account ID: "+account[1]+"\n") {
		t.Errorf("acme-tiny's second run did not find its account %s:\n%s", account[1], log)
	}
	second := checkIssued(t, chain, domainKey, s.root, name)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Errorf("the second run kept serial %x; want a new certificate", first.SerialNumber)
	}
	if entries, err := os.ReadDir(acmeDir); err != nil || len(entries) != 0 {
		t.Errorf("acme-tiny left %d token files in its acme-dir (%v); it removes each once valid", len(entries), err)
	}
}
