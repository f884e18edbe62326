package caddyacmeproxy

import (
	"bytes"
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// exampleScriptCA makes the example script signer's CA in caDir (skipping
// the test without the tools the script needs) and returns the script.
func exampleScriptCA(t *testing.T, caDir string) string {
	t.Helper()
	needScriptTools(t)
	example := absPath(t, "examples/script-signer/openssl-ca.sh")
	if out, err := exec.Command(example, "init", caDir).CombinedOutput(); err != nil {
		t.Fatalf("openssl-ca.sh init: %v\n%s", err, out)
	}
	return example
}

// The example script signer signs the dates an order asks for exactly, or
// refuses them with exit 2 and "badValidity:" (which the order fails as
// malformed): at most 90 days, never past its CA's own end. A notBefore
// asked for alone begins the leaf's 90 days.
func TestTheExampleScriptSignsTheDatesAskedForOrRefusesThem(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	example := exampleScriptCA(t, caDir)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"dates.example.com"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	day := 24 * time.Hour
	tests := []struct {
		name                string
		notBefore, notAfter time.Time // zero: not asked for
		wantRefuse          string    // "" to sign
		wantNotAfter        time.Time // when notAfter is not asked for
	}{
		{"ok/thirty days is signed to the second", time.Time{}, now.Add(30 * day), "", time.Time{}},
		{"ok/a notBefore alone starts the ninety days there", now.Add(10 * day), time.Time{}, "", now.Add(100 * day)},
		{"ok/a notBefore past ninety days ahead still ends ninety days after it", now.Add(120 * day), time.Time{}, "", now.Add(210 * day)},
		{"fail/two hundred days is more than the CA signs", time.Time{}, now.Add(200 * day), "badValidity: this CA signs at most 90 days", time.Time{}},
		{"fail/past the CA's end", time.Time{}, now.AddDate(20, 0, 0), "badValidity:", time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dateOrNull := func(d time.Time) any {
				if d.IsZero() {
					return nil
				}
				return d.Format(time.RFC3339)
			}
			req, _ := json.Marshal(map[string]any{"version": 1, "operation": "issue", "order": "o1", "profile": "script",
				"csr":         base64.RawURLEncoding.EncodeToString(csr),
				"identifiers": []map[string]string{{"type": "dns", "value": "dates.example.com"}},
				"not_before":  dateOrNull(tc.notBefore), "not_after": dateOrNull(tc.notAfter)})
			cmd := exec.Command(example)
			cmd.Env = []string{"CA_DIR=" + caDir, "PATH=/usr/bin:/bin"}
			cmd.Stdin = bytes.NewReader(req)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if tc.wantRefuse != "" {
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.HasPrefix(stderr.String(), tc.wantRefuse) {
					t.Fatalf("exit %v, stderr %q; want exit 2 with %q", err, stderr.String(), tc.wantRefuse)
				}
				return
			}
			if err != nil {
				t.Fatalf("issue: %v\n%s", err, stderr.String())
			}
			block, _ := pem.Decode(stdout.Bytes())
			if block == nil {
				t.Fatalf("no certificate on stdout: %q", stdout.String())
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.notBefore.IsZero() && !leaf.NotBefore.Equal(tc.notBefore) {
				t.Errorf("the leaf begins at %v; the order asked for %v", leaf.NotBefore, tc.notBefore)
			}
			if want := cmp.Or(tc.notAfter, tc.wantNotAfter); !leaf.NotAfter.Equal(want) {
				t.Errorf("the leaf ends at %v; want %v", leaf.NotAfter, want)
			}
		})
	}
}
