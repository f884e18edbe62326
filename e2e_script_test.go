package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"
)

// scriptProfile is the profile the script signer tests add to the e2e
// config.
const scriptProfile = "script"

// needScriptTools skips the test when a program the example script signer
// runs is missing (and fails it under ACMEPROXY_E2E=1).
func needScriptTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "openssl", "jq", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("ACMEPROXY_E2E") == "1" {
				t.Fatalf("%s is not on PATH; ACMEPROXY_E2E=1 requires it (the example script signer runs it)", tool)
			}
			t.Skipf("skipping: %s is not on PATH, and the example script signer runs it", tool)
		}
	}
}

// absPath is file, relative to the package directory, made absolute: a
// script signer's command must be.
func absPath(t *testing.T, file string) string {
	t.Helper()
	p, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// scriptProfileBlock is an acme_proxy directive for scriptProfile signed by
// `signer script` with the given settings.
func scriptProfileBlock(env *e2eEnv, httpPort int, settings string) string {
	return fmt.Sprintf(`	acme_proxy {
		profile %s
		resolvers %s
		validation_ports {
			http %d
		}
		signer script {
%s
		}
	}`, scriptProfile, env.DNSAddr, httpPort, settings)
}

// newE2ELegoAt returns a lego client with a new account at profile,
// answering http-01 on httpPort.
func newE2ELegoAt(t *testing.T, env *e2eEnv, profile string, httpPort int) *lego.Client {
	t.Helper()
	user := &e2eLegoUser{key: e2eP256Key(t)}
	cfg := lego.NewConfig(user)
	cfg.CADirURL = env.directoryURL(profile)
	cfg.HTTPClient = env.client
	client, err := lego.NewClient(cfg)
	if err != nil {
		t.Fatalf("lego.NewClient: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	if user.reg, err = client.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := client.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
		t.Fatal(err)
	}
	return client
}

func TestLegoIssuesRenewsAndRevokesThroughTheOpenSSLCAExampleScript(t *testing.T) {
	needScriptTools(t)
	example := absPath(t, "examples/script-signer/openssl-ca.sh")
	env := newE2EEnv(t)
	caDir := filepath.Join(env.Dir, "ca")
	if out, err := exec.Command(example, "init", caDir).CombinedOutput(); err != nil {
		t.Fatalf("openssl-ca.sh init: %v\n%s", err, out)
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caCert := e2ePEMChain(t, caPEM)[0]
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	// The CA directory reaches the script through a placeholder in env.
	t.Setenv("E2E_SCRIPT_CA_DIR", caDir)
	httpPort := freePort(t)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t),
		ExtraProfiles: scriptProfileBlock(env, httpPort, "\t\t\tcommand "+example+"\n\t\t\ttimeout 30s\n\t\t\tenv CA_DIR {env.E2E_SCRIPT_CA_DIR}")})

	ctx, cancel := context.WithTimeout(t.Context(), 3*e2eWait)
	defer cancel()
	client := newE2ELegoAt(t, env, scriptProfile, httpPort)
	names := []string{"script-lego.example.com", "www.script-lego.example.com"}
	check := func(what string, res *certificate.Resource) *x509.Certificate {
		t.Helper()
		chain := e2ePEMChain(t, res.Certificate)
		leaf, err := x509.ParseCertificate(chain[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(chain) != 2 || !bytes.Equal(chain[1], caCert) {
			t.Errorf("%s: the chain is %d certificates, not the leaf and the example CA", what, len(chain))
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: names[1]}); err != nil {
			t.Errorf("%s: the leaf does not verify against the example CA: %v", what, err)
		}
		if got := slices.Sorted(slices.Values(leaf.DNSNames)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
			t.Errorf("%s: the leaf names %v; want %v", what, got, names)
		}
		return leaf
	}

	res, err := client.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: names, Bundle: true, KeyType: certcrypto.EC256})
	if err != nil {
		t.Fatalf("lego Obtain: %v", err)
	}
	first := check("issued", res)
	renewed, err := client.Certificate.Renew(ctx, *res, &certificate.RenewOptions{Bundle: true, KeyType: certcrypto.EC256})
	if err != nil {
		t.Fatalf("lego Renew: %v", err)
	}
	second := check("renewed", renewed)
	if first.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Errorf("the renewal returned the same certificate")
	}

	reason := uint(4) // superseded, by the renewal
	if err := client.Certificate.RevokeWithReason(ctx, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: first.Raw}), &reason); err != nil {
		t.Fatalf("lego RevokeWithReason: %v", err)
	}
	// The script was told: the CA's own index has it revoked, as superseded.
	index, err := os.ReadFile(filepath.Join(caDir, "index.txt"))
	if err != nil {
		t.Fatal(err)
	}
	serialHex := strings.ToUpper(first.SerialNumber.Text(16))
	var line string
	for l := range strings.SplitSeq(string(index), "\n") {
		if f := strings.Split(l, "\t"); len(f) > 3 && strings.EqualFold(f[3], serialHex) {
			line = l
		}
	}
	if !strings.HasPrefix(line, "R\t") || !strings.Contains(line, ",superseded") {
		t.Errorf("the CA's index line for %s is %q; want it revoked as superseded\n%s", serialHex, line, index)
	}
	// And so is the proxy's ledger.
	c, err := activeApp(t).db.CertificateBySerial(ctx, scriptProfile, hex.EncodeToString(first.SerialNumber.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if c.RevokedAt.IsZero() || c.Reason == nil || *c.Reason != 4 {
		t.Errorf("the proxy recorded revoked at %v, reason %v; want revoked, reason 4", c.RevokedAt, c.Reason)
	}
	if time.Since(c.RevokedAt) > time.Minute {
		t.Errorf("revoked at %v", c.RevokedAt)
	}
}
