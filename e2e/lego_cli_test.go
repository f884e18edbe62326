//go:build unix

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLegoCLIIssuesRenewsAndRevokes has Debian's lego command line (v4,
// whose global flags come before the command) register and get a
// certificate with http-01 (its own challenge server on the port the
// profile validates), leave it alone while more days are left than
// `renew --days` asks, renew it once fewer are, and revoke it with a
// reason; the CRL then lists the renewed one with that reason, and not
// the first.
func TestLegoCLIIssuesRenewsAndRevokes(t *testing.T) {
	lego := needTool(t, "lego", "install it with `apt-get install --no-install-recommends lego`")
	caddy := buildCaddy(t)

	const name = "lego.example.com"
	s := startCertbotServer(t, caddy, "", certbotSite{profile: "lego"})
	l := legoRun{bin: lego, home: t.TempDir(), rootFile: s.rootFile, global: []string{
		"--server", s.server,
		"--email", "ops@example.com",
		"--domains", name,
		"--http", "--http.port", fmt.Sprintf("127.0.0.1:%d", s.challengePort),
	}}
	l.path = filepath.Join(l.home, "lego")
	l.global = append(l.global, "--path", l.path)
	crt := filepath.Join(l.path, "certificates", name+".crt")
	key := filepath.Join(l.path, "certificates", name+".key")

	l.run(t, []string{"--accept-tos"}, "run")
	first := checkIssued(t, crt, key, s.root, name)

	// A local CA's leaf lasts 7 days: more than one left, fewer than 30.
	l.run(t, nil, "renew", "--days", "1", "--no-random-sleep")
	if kept := checkIssued(t, crt, key, s.root, name); kept.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("lego renew --days 1 replaced serial %x (%s left) with %x; want it kept",
			first.SerialNumber, time.Until(first.NotAfter).Round(time.Minute), kept.SerialNumber)
	}
	l.run(t, nil, "renew", "--days", "30", "--no-random-sleep")
	second := checkIssued(t, crt, key, s.root, name)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("lego renew --days 30 kept serial %x with %s left; want it renewed",
			first.SerialNumber, time.Until(first.NotAfter).Round(time.Minute))
	}

	l.run(t, nil, "revoke", "--reason", "4")
	crlURL := strings.TrimSuffix(s.server, "directory") + "crl"
	fetchCRL(t, crlURL, s.root, map[string]int{second.SerialNumber.Text(16): 4})
	if listedOn(t, crlURL, s.root, first) {
		t.Errorf("the first certificate, never revoked, is on the CRL")
	}
}

// legoRun runs lego v4 with its own HOME and --path, trusting rootFile.
type legoRun struct {
	bin, home, path, rootFile string
	global                    []string // the global flags every command shares
}

// run runs `lego <l.global> <extra> <args>` and fails the test, with its
// output, unless it exits 0.
func (l legoRun) run(t *testing.T, extra []string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.bin, slices.Concat(l.global, extra, args)...)
	// lego adds the PEM certificates LEGO_CA_CERTIFICATES names to the
	// system's roots.
	cmd.Env = append(os.Environ(), "HOME="+l.home, "LEGO_CA_CERTIFICATES="+l.rootFile)
	inOwnGroup(cmd)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lego %s: %v\n%s", args[0], err, out)
	}
	t.Logf("lego %s took %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
}
