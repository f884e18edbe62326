//go:build unix

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDehydratedIssuesRenewsAndRevokes has Debian's dehydrated — the shell
// client (bash, curl and openssl) that appliances and small fleets run
// from cron — register, get a certificate with http-01 (its challenge
// files served from its WELLKNOWN directory, as a web server would), renew
// it and revoke it; the CRL then lists the revoked one.
func TestDehydratedIssuesRenewsAndRevokes(t *testing.T) {
	dehydrated := needTool(t, "dehydrated", "install it with `apt-get install --no-install-recommends dehydrated`")
	caddy := buildCaddy(t)

	const name = "dh.example.com"
	s := startCertbotServer(t, caddy, "", certbotSite{profile: "dehydrated"})
	d := dehydratedRun{bin: dehydrated, base: t.TempDir()}
	wellknown := filepath.Join(d.base, "wellknown")
	serveWellKnown(t, wellknown, s.challengePort)
	d.config = filepath.Join(d.base, "config")
	if err := os.WriteFile(d.config, fmt.Appendf(nil, `CA=%q
BASEDIR=%q
WELLKNOWN=%q
CHALLENGETYPE="http-01"
KEY_ALGO="prime256v1"
CURL_OPTS="--cacert %s"
`, s.server, d.base, wellknown, s.rootFile), 0o600); err != nil {
		t.Fatal(err)
	}

	d.run(t, "--register", "--accept-terms")
	d.run(t, "--cron", "--domain", name)
	live := filepath.Join(d.base, "certs", name)
	first := checkCertbotCert(t, live, s.root, name)
	if k, ok := first.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("the leaf's key is %T; want the P-256 key of dehydrated's CSR (KEY_ALGO prime256v1)", first.PublicKey)
	}

	d.run(t, "--cron", "--force", "--domain", name)
	second := checkCertbotCert(t, live, s.root, name)
	if first.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Errorf("the forced renewal kept serial %x; want a new certificate", first.SerialNumber)
	}

	d.run(t, "--revoke", filepath.Join(live, "cert.pem"))
	crlURL := strings.TrimSuffix(s.server, "directory") + "crl"
	fetchCRL(t, crlURL, s.root, map[string]int{second.SerialNumber.Text(16): 0})
	if listedOn(t, crlURL, s.root, first) {
		t.Errorf("the first certificate, never revoked, is on the CRL")
	}
}

// dehydratedRun runs dehydrated with its own config file and base
// directory (accounts, certificates, lock).
type dehydratedRun struct {
	bin, base, config string
}

// run runs `dehydrated --config <c.config> <args>` and fails the test,
// with its output, unless it exits 0.
func (c dehydratedRun) run(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--config", c.config}, args...)...)
	// Its own HOME: nothing of the user's (a ~/.curlrc) reaches it.
	cmd.Env = append(os.Environ(), "HOME="+c.base)
	inOwnGroup(cmd)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dehydrated %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("dehydrated %s took %s", args[0], time.Since(start).Round(time.Millisecond))
}

// serveWellKnown serves dir's files at /.well-known/acme-challenge/ on
// 127.0.0.1:port, as the web server of a host running dehydrated does
// from its WELLKNOWN directory, until the test ends.
func serveWellKnown(t *testing.T, dir string, port int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/.well-known/acme-challenge/", http.StripPrefix("/.well-known/acme-challenge/", http.FileServer(http.Dir(dir))))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// listedOn reports whether the CRL at url lists c.
func listedOn(t *testing.T, url string, root *x509.Certificate, c *x509.Certificate) bool {
	t.Helper()
	crl, err := x509.ParseRevocationList(fetchCRL(t, url, root, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range crl.RevokedCertificateEntries {
		if e.SerialNumber.Cmp(c.SerialNumber) == 0 {
			return true
		}
	}
	return false
}
