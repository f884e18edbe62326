//go:build unix

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCertbotIssuesRenewsAndRevokesThroughTheOpenSSLCAExampleScript has
// certbot get, renew and revoke a certificate from the built caddy whose
// profile signs with examples/script-signer/openssl-ca.sh.
func TestCertbotIssuesRenewsAndRevokesThroughTheOpenSSLCAExampleScript(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	for _, tool := range []string{"bash", "openssl", "jq", "flock"} {
		needTool(t, tool, "the example script signer runs it")
	}
	example, err := filepath.Abs("../examples/script-signer/openssl-ca.sh")
	if err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(t.TempDir(), "ca")
	if out, err := exec.Command(example, "init", caDir).CombinedOutput(); err != nil {
		t.Fatalf("openssl-ca.sh init: %v\n%s", err, out)
	}
	caddy := buildCaddy(t)

	const name = "cb-script.example.com"
	s := startCertbotServer(t, caddy, certbot, certbotSite{
		profile: "script",
		body:    "\t\tsigner script {\n\t\t\tcommand " + example + "\n\t\t\ttimeout 30s\n\t\t\tenv CA_DIR {env.SCRIPT_CA_DIR}\n\t\t}",
		env:     []string{"SCRIPT_CA_DIR=" + caDir},
	})
	cb := s.cb
	ca, err := readCerts(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}

	live := filepath.Join(cb.configDir, "live", name)
	cb.run(t, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", name)
	first := checkCertbotCert(t, live, ca[0], name)
	cb.run(t, "renew", "--force-renewal", "--no-random-sleep-on-renew", "--cert-name", name)
	second := checkCertbotCert(t, live, ca[0], name)
	if first.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Errorf("renewal kept serial %x; want a new certificate", first.SerialNumber)
	}
	cb.run(t, "revoke", "--cert-path", filepath.Join(live, "cert.pem"), "--reason", "superseded", "--no-delete-after-revoke")

	// The script revoked it in the CA's own index; the first stays valid.
	index, err := os.ReadFile(filepath.Join(caDir, "index.txt"))
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(string(index)), "\n") {
		if f := strings.Split(l, "\t"); len(f) > 3 {
			status[strings.ToLower(strings.TrimLeft(f[3], "0"))] = f[0] + " " + f[2]
		}
	}
	if got := status[second.SerialNumber.Text(16)]; !strings.HasPrefix(got, "R ") || !strings.HasSuffix(got, ",superseded") {
		t.Errorf("the CA's index has the renewed certificate as %q; want revoked, superseded\n%s", got, index)
	}
	if got := status[first.SerialNumber.Text(16)]; got != "V " {
		t.Errorf("the CA's index has the first certificate as %q; want valid\n%s", got, index)
	}
	if !slices.Contains(second.DNSNames, name) {
		t.Errorf("the renewed certificate names %v", second.DNSNames)
	}
}
