package acmeproxy

import (
	"context"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/signer/script"
)

// needOpenSSLCA skips the test when a program the example script signer
// runs is missing (fails under ACMEPROXY_E2E=1), and returns the example's
// absolute path.
func needOpenSSLCA(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"bash", "openssl", "jq", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("ACMEPROXY_E2E") == "1" {
				t.Fatalf("%s is not on PATH; ACMEPROXY_E2E=1 requires it (the example script signer runs it)", tool)
			}
			t.Skipf("skipping: %s is not on PATH, and the example script signer runs it", tool)
		}
	}
	p, err := filepath.Abs("../examples/script-signer/openssl-ca.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newOpenSSLCA creates a CA of the example script signer in dir (which
// must not hold one) whose serial file starts at 01, as `openssl ca`'s
// own documentation sets it up.
func newOpenSSLCA(t *testing.T, prog, dir string) {
	t.Helper()
	if out, err := exec.Command(prog, "init", dir).CombinedOutput(); err != nil {
		t.Fatalf("creating a CA in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "serial"), []byte("01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// scriptEnvAt serves profile on the store at place, signed by the example
// script signer over the CA in caDir.
func scriptEnvAt(t *testing.T, place, profile, prog, caDir string) *testEnv {
	t.Helper()
	sg, err := script.New(script.Options{Command: []string{prog}, Env: map[string]string{"CA_DIR": caDir},
		Revoke: true, MaxAttempts: 2, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return newTestEnvWith(t, envOptions{dbPath: place,
		mutate: func(c *ProfileConfig) { c.Profile = profile },
		wrap:   func(*localca.Signer) signer.Signer { return sg },
		runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond, BackoffBase: 100 * time.Millisecond, BackoffCap: 100 * time.Millisecond},
		profileHandlers: func(p authority.Profiles) []jobs.Handler {
			return authority.SignerJobHandlers(p, p.(staticProfiles).All(), nil)
		}})
}

// A serial is unique per issuing CA (RFC 5280 §4.1.2.2), not across the
// store: `openssl ca` signers that each count from 01 — two profiles with
// a CA each, or one profile whose CA was created again with its serial
// file reset — issue serial 01 twice. Both orders become valid and
// deliver their own certificate; revoke-cert revokes the certificate it
// is given, and no other; renewalInfo answers each certID (its CA's key
// identifier and the serial) for its own certificate.
func TestTwoCAsThatIssueTheSameSerialEachDeliverRevokeAndAnswerRenewalInfoForTheirOwnCertificate(t *testing.T) {
	prog := needOpenSSLCA(t)
	tests := []struct {
		name string
		// sameProfile: one profile, its CA created again between the two
		// issuances; otherwise two profiles, each with its CA.
		sameProfile bool
	}{
		{name: "two profiles with a CA each", sameProfile: false},
		{name: "one profile whose CA was created again", sameProfile: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				place := newPlace(t)
				dirs := t.TempDir()
				caOne, caTwo := filepath.Join(dirs, "one"), filepath.Join(dirs, "two")
				newOpenSSLCA(t, prog, caOne)
				envOne := scriptEnvAt(t, place, "ca-one", prog, caOne)
				envTwo := envOne
				if !tt.sameProfile {
					newOpenSSLCA(t, prog, caTwo)
					envTwo = scriptEnvAt(t, place, "ca-two", prog, caTwo)
				}

				one := envOne.issue(ctx, envOne.client(ctx), "one.example.com")
				if tt.sameProfile {
					// The CA is created again where the profile's
					// signer finds it: a new key, the serial file at 01.
					if err := os.Rename(caOne, caTwo); err != nil {
						t.Fatal(err)
					}
					newOpenSSLCA(t, prog, caOne)
				}
				clientTwo := envTwo.client(ctx)
				two := envTwo.issue(ctx, clientTwo, "two.example.com")
				for _, c := range []issued{one, two} {
					if c.leaf.SerialNumber.Cmp(big.NewInt(1)) != 0 {
						t.Fatalf("the certificate of order %s has serial %x; want 01 (the test's CAs count from there)", c.order, c.leaf.SerialNumber)
					}
				}
				if string(one.leaf.AuthorityKeyId) == string(two.leaf.AuthorityKeyId) {
					t.Fatal("both certificates name one CA key; the test needs two CAs")
				}

				// Both answer renewalInfo, neither revoked: a window ahead.
				now := time.Now()
				for what, c := range map[string]issued{"the first": one, "the second": two} {
					e := envOne
					if c.order == two.order {
						e = envTwo
					}
					if w := e.window(c.leaf, "21600"); !w.SuggestedWindow.Start.After(now) {
						t.Errorf("renewalInfo of %s certificate: a window from %s, in the past; want its own, ahead", what, w.SuggestedWindow.Start)
					}
				}

				// The second is revoked with its own certificate.
				if err := clientTwo.RevokeCert(ctx, nil, two.der, acme.CRLReasonSuperseded); err != nil {
					t.Fatalf("revoke-cert of the second certificate: %v", err)
				}
				revoked, err := envTwo.db.CertificateOfOrder(ctx, two.order)
				if err != nil || revoked.RevokedAt.IsZero() {
					t.Errorf("the second certificate after its revocation: revoked at %v, %v; want revoked", revoked.RevokedAt, err)
				}
				kept, err := envOne.db.CertificateOfOrder(ctx, one.order)
				if err != nil || !kept.RevokedAt.IsZero() {
					t.Errorf("the first certificate after the second's revocation: revoked at %v, %v; want it untouched", kept.RevokedAt, err)
				}
				if w := envTwo.window(two.leaf, "21600"); !w.SuggestedWindow.Start.Before(now) {
					t.Errorf("renewalInfo of the revoked certificate: a window from %s; want one in the past (renew now)", w.SuggestedWindow.Start)
				}
				if w := envOne.window(one.leaf, "21600"); !w.SuggestedWindow.Start.After(now) {
					t.Errorf("renewalInfo of the certificate not revoked: a window from %s; want its own, ahead", w.SuggestedWindow.Start)
				}
			})
		})
	}
}
