package caddyacmeproxy

import (
	"bytes"
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

// The example script signer signs the dates an order asks for exactly, or
// refuses them with exit 2 and "badValidity:" (which the order fails as
// malformed): at most 90 days, never past its CA's own end.
func TestTheExampleScriptSignsTheDatesAskedForOrRefusesThem(t *testing.T) {
	needScriptTools(t)
	example := absPath(t, "examples/script-signer/openssl-ca.sh")
	caDir := filepath.Join(t.TempDir(), "ca")
	if out, err := exec.Command(example, "init", caDir).CombinedOutput(); err != nil {
		t.Fatalf("openssl-ca.sh init: %v\n%s", err, out)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"dates.example.com"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	tests := []struct {
		name       string
		notAfter   time.Time
		wantRefuse string // "" to sign
	}{
		{"ok/thirty days is signed to the second", now.Add(30 * 24 * time.Hour), ""},
		{"fail/two hundred days is more than the CA signs", now.Add(200 * 24 * time.Hour), "badValidity: this CA signs at most 90 days"},
		{"fail/past the CA's end", now.AddDate(20, 0, 0), "badValidity:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := json.Marshal(map[string]any{"version": 1, "operation": "issue", "order": "o1", "profile": "script",
				"csr":         base64.RawURLEncoding.EncodeToString(csr),
				"identifiers": []map[string]string{{"type": "dns", "value": "dates.example.com"}},
				"not_after":   tc.notAfter.Format(time.RFC3339)})
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
			if !leaf.NotAfter.Equal(tc.notAfter) {
				t.Errorf("the leaf ends at %v; the order asked for %v", leaf.NotAfter, tc.notAfter)
			}
		})
	}
}
