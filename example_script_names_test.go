package caddyacmeproxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// The example script signer's leaf names exactly the order's identifiers,
// its common name too, which holds at most 64 characters (RFC 5280's
// ub-common-name): a name longer than that is never cut short into a
// common name that names nothing the order asked for (the proxy would
// refuse such a leaf, the CA having issued it). A leaf with no name short
// enough has an empty subject and a critical subjectAltName (RFC 5280
// §4.2.1.6).
func TestTheExampleScriptNeverCutsANameShortIntoTheCommonName(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	example := exampleScriptCA(t, caDir)
	long := strings.Repeat("a", 40) + "." + strings.Repeat("b", 30) + ".example.com" // 83 characters
	tests := []struct {
		name   string
		names  []string
		wantCN string
	}{
		{"ok/a short first name is the common name", []string{"short.example.com", long}, "short.example.com"},
		{"ok/a long first name leaves the common name to a short one", []string{long, "short.example.com"}, "short.example.com"},
		{"ok/only long names leave the subject empty", []string{long}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: tc.names}, key)
			if err != nil {
				t.Fatal(err)
			}
			var idents []acme.Identifier
			for _, n := range tc.names {
				idents = append(idents, acme.Identifier{Type: acme.IdentifierDNS, Value: n})
			}
			req, _ := json.Marshal(map[string]any{"version": 1, "operation": "issue", "order_id": "o1", "profile": "script",
				"csr": base64.RawURLEncoding.EncodeToString(csr), "identifiers": idents, "not_before": nil, "not_after": nil})
			cmd := exec.Command(example)
			cmd.Env = []string{"CA_DIR=" + caDir, "PATH=/usr/bin:/bin"}
			cmd.Stdin = bytes.NewReader(req)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
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
			if err := signer.CheckLeaf(leaf, key.Public(), idents); err != nil {
				t.Fatalf("the proxy would refuse the example's leaf: %v", err)
			}
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("common name %q, want %q", leaf.Subject.CommonName, tc.wantCN)
			}
			if len(leaf.RawSubject) > 2 { // a non-empty Name
				return
			}
			sanOID := asn1.ObjectIdentifier{2, 5, 29, 17}
			for _, e := range leaf.Extensions {
				if e.Id.Equal(sanOID) && !e.Critical {
					t.Errorf("the subject is empty but the subjectAltName is not critical (RFC 5280 §4.2.1.6)")
				}
			}
		})
	}
}
