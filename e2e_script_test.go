package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	jose "github.com/go-jose/go-jose/v4"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
	"github.com/acmeproxy/caddy-acme-proxy/signer/script"
	"github.com/acmeproxy/caddy-acme-proxy/store"
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

func TestLegoIssuesRenewsAndRevokesThroughTheOpenSSLCAExampleScript(t *testing.T) {
	env := newE2EEnv(t)
	caDir := filepath.Join(env.Dir, "ca")
	example := exampleScriptCA(t, caDir)
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
	client := newE2ELegoAt(t, env, scriptProfile)
	if err := client.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
		t.Fatal(err)
	}
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
	cs, err := activeApp(t).db.CertificatesBySerial(ctx, scriptProfile, hex.EncodeToString(first.SerialNumber.Bytes()))
	if err != nil || len(cs) != 1 {
		t.Fatalf("the certificates with serial %x: %d, %v; want 1", first.SerialNumber, len(cs), err)
	}
	c := cs[0]
	if c.RevokedAt.IsZero() || c.Reason == nil || *c.Reason != 4 {
		t.Errorf("the proxy recorded revoked at %v, reason %v; want revoked, reason 4", c.RevokedAt, c.Reason)
	}
	if time.Since(c.RevokedAt) > time.Minute {
		t.Errorf("revoked at %v", c.RevokedAt)
	}
}

// scriptJob returns the script_issue job of an order once an attempt of
// it has failed (its last error set).
func scriptJobFailedOnce(t *testing.T, app *App, orderID string) store.Job {
	t.Helper()
	for end := time.Now().Add(e2eWait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		js, err := app.queue.List(t.Context(), store.JobFilter{Kind: script.IssueKind, Key: orderID})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 1 && js[0].LastError != "" {
			return js[0]
		}
	}
	t.Fatalf("no failed attempt of the script_issue job of order %s within %s", orderID, e2eWait)
	return store.Job{}
}

func TestEveryWayAScriptSignerFailsReachesTheClientGenericallyAndTheOperatorInFull(t *testing.T) {
	needScriptTools(t)
	modes := absPath(t, "testdata/script-signer/modes.sh")
	env := newE2EEnv(t)
	pidDir := t.TempDir()
	ln := e2eListen(t)
	srv, httpPort := serveE2EHTTP01(t, ln), e2ePort(ln)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t),
		ExtraProfiles: scriptProfileBlock(env, httpPort, "\t\t\tcommand "+modes+"\n\t\t\ttimeout 2s\n\t\t\tenv PID_DIR "+pidDir)})
	app := activeApp(t)
	op := app.Operator()

	tests := []struct {
		mode string
		// refusedAs is the problem type of an exit-2 refusal; empty for a
		// failure the job retries.
		refusedAs string
		// reason is what the operator sees (job, order, audit); the
		// client must not.
		reason string
	}{
		{"refuse-csr", "urn:ietf:params:acme:error:badCSR", "RSA keys only on this CA"},
		{"refuse-name", "urn:ietf:params:acme:error:rejectedIdentifier", "is not in the inventory"},
		{"tempfail", "", "failed temporarily: exited with status 75: the HSM is busy"},
		{"crash", "", "exited with status 1: openssl: unable to load CA private key"},
		{"signal", "", "was killed by signal killed"},
		{"timeout", "", "timed out after 2s and was killed"},
		{"big", "", "wrote more than 1048576 bytes on stdout"},
		{"garbage", "", "output holds something other than PEM certificates"},
		{"wrongkey", "", "a certificate that is not the order's: the leaf certifies another key than the CSR's"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
			defer cancel()
			name := tt.mode + ".script-modes.example.com"
			c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(scriptProfile)}
			o := e2eAuthorizedOrder(ctx, t, c, srv, name)
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, e2eP256Key(t))
			if err != nil {
				t.Fatal(err)
			}
			finalized := make(chan error, 1)
			go func() {
				_, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
				finalized <- err
			}()
			orderID := path.Base(o.URI)

			// A certificate for another key is a mis-issuance: the order
			// fails on the first run, which is not retried.
			if tt.refusedAs == "" && tt.mode != "wrongkey" {
				// Retried: the operator sees the reason on the job while
				// the order waits; the operator then gives up on it.
				j := scriptJobFailedOnce(t, app, orderID)
				if !strings.Contains(j.LastError, tt.reason) {
					t.Errorf("the job's last error is %q; want %q", j.LastError, tt.reason)
				}
				if v, err := op.ShowOrder(ctx, orderID); err != nil || v.Status != "processing" {
					t.Errorf("after a failed attempt the order is %q (%v); want processing", v.Status, err)
				}
				if _, err := op.CancelJob(ctx, j.ID); err != nil {
					t.Fatalf("CancelJob: %v", err)
				}
			}
			if err := <-finalized; err == nil {
				t.Fatal("the order was issued")
			}
			got, err := c.GetOrder(ctx, o.URI)
			if err != nil {
				t.Fatal(err)
			}
			wantType := tt.refusedAs
			if wantType == "" {
				wantType = "urn:ietf:params:acme:error:serverInternal"
			}
			if got.Status != xacme.StatusInvalid || got.Error == nil || got.Error.ProblemType != wantType {
				t.Fatalf("the client sees the order %s with %+v; want invalid with %s", got.Status, got.Error, wantType)
			}
			if strings.Contains(got.Error.Detail, tt.reason) || strings.Contains(got.Error.Detail, modes) {
				t.Errorf("the client's detail %q tells the script's reason", got.Error.Detail)
			}
			v, err := op.ShowOrder(ctx, orderID)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(v.FailureDetail, tt.reason) {
				t.Errorf("the operator's failure detail is %q; want %q", v.FailureDetail, tt.reason)
			}
			evs, err := app.db.SearchAudit(ctx, store.AuditFilter{OrderID: orderID, Event: "certificate_issue_failed"})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || !strings.Contains(evs[0].Detail, tt.reason) {
				t.Errorf("audit rows of the failure: %+v; want one with %q", evs, tt.reason)
			}
			if tt.mode == "timeout" {
				b, err := os.ReadFile(filepath.Join(pidDir, "timeout.pid"))
				if err != nil {
					t.Fatal(err)
				}
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				if !proctest.Gone(pid) {
					proctest.Kill(pid)
					t.Errorf("the sleeping grandchild %d outlived the timeout", pid)
				}
			}
		})
	}
}

// scriptRevoke posts revoke-cert for der as c's account, by hand:
// x/crypto/acme retries a 503 until its context ends, and the test wants
// to see the 503.
func scriptRevoke(t *testing.T, env *e2eEnv, c *xacme.Client, der []byte, reason int) (int, http.Header, string) {
	t.Helper()
	base := strings.TrimSuffix(env.directoryURL(scriptProfile), "/directory")
	resp, err := env.client.Head(base + "/new-nonce")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	url := base + "/revoke-cert"
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: c.Key}, &jose.SignerOptions{
		ExtraHeaders: map[jose.HeaderKey]any{"nonce": resp.Header.Get("Replay-Nonce"), "url": url, "kid": string(c.KID)},
	})
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"certificate": base64.RawURLEncoding.EncodeToString(der), "reason": reason})
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	// The server holds a revocation for up to DefaultRevokeWait (10 s)
	// before it answers 503, as long as env.client's whole timeout: give
	// the request room past that wait.
	patient := *env.client
	patient.Timeout = authority.DefaultRevokeWait + e2eWait
	resp, err = patient.Post(url, "application/jose+json", strings.NewReader(jws.FullSerialize()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

func TestAScriptRevocationSlowerThanTheWaitAnswers503AndAskingAgainFollowsTheSameJob(t *testing.T) {
	hold := absPath(t, "testdata/script-signer/hold-revoke.sh")
	env := newE2EEnv(t)
	caDir, holdDir := filepath.Join(env.Dir, "ca"), t.TempDir()
	example := exampleScriptCA(t, caDir)
	ln := e2eListen(t)
	srv, httpPort := serveE2EHTTP01(t, ln), e2ePort(ln)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t),
		ExtraProfiles: scriptProfileBlock(env, httpPort, fmt.Sprintf(
			"\t\t\tcommand %s\n\t\t\ttimeout 1m\n\t\t\tenv CA_DIR %s\n\t\t\tenv EXAMPLE %s\n\t\t\tenv HOLD_DIR %s", hold, caDir, example, holdDir))})

	ctx, cancel := context.WithTimeout(t.Context(), 3*e2eWait)
	defer cancel()
	c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(scriptProfile)}
	if _, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS); err != nil {
		t.Fatalf("Register: %v", err)
	}
	const name = "script-slow-revoke.example.com"
	o, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(name))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, o.AuthzURLs[0]))
	chain := e2eFinishOrder(ctx, t, c, o, []string{name})

	status, header, body := scriptRevoke(t, env, c, chain[0], 4)
	if status != http.StatusServiceUnavailable || header.Get("Retry-After") == "" {
		t.Fatalf("revoke while the script holds: %d, Retry-After %q, %s; want 503 with Retry-After", status, header.Get("Retry-After"), body)
	}
	if err := os.WriteFile(filepath.Join(holdDir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if status, _, body := scriptRevoke(t, env, c, chain[0], 4); status != http.StatusOK {
		t.Fatalf("revoke again once the script goes on: %d %s; want 200", status, body)
	}
	js, err := activeApp(t).queue.List(ctx, store.JobFilter{Kind: "signer_revoke"})
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 1 || js[0].Status != store.JobDone {
		t.Errorf("signer_revoke jobs: %+v; want one, done", js)
	}
	index, err := os.ReadFile(filepath.Join(caDir, "index.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(index), "R\t") {
		t.Errorf("the CA's index: %s; want the certificate revoked", index)
	}
}

// A script signer's arguments take placeholders, as its env values do:
// the program is run with the {env.*} value, and that value appears
// neither in what the operator is shown of its stderr (the order's
// failure detail, the audit row, the job) nor in Caddy's log, where it
// is "[redacted arg N]".
func TestAScriptSignerIsRunWithItsArgumentsPlaceholdersReplacedAndNeverShowsTheirValues(t *testing.T) {
	const token = "sign-arg-token-e2e"
	t.Setenv("E2E_SIGN_TOKEN", token)
	dir := t.TempDir()
	got := filepath.Join(dir, "args")
	prog := filepath.Join(dir, "sign.sh")
	body := fmt.Sprintf("#!/bin/sh\ncat >/dev/null\nprintf '%%s\\n' \"$@\" > %s\necho \"the backend refused token $2\" >&2\nexit 2\n", got)
	if err := os.WriteFile(prog, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv, httpPort := serveE2EHTTP01(t, ln), e2ePort(ln)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t),
		ExtraProfiles: scriptProfileBlock(env, httpPort, "\t\t\tcommand "+prog+" --token {env.E2E_SIGN_TOKEN}")})
	app := activeApp(t)

	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	const name = "placeholder.script-args.example.com"
	c := &xacme.Client{Key: e2eP256Key(t), HTTPClient: env.client, DirectoryURL: env.directoryURL(scriptProfile)}
	o := e2eAuthorizedOrder(ctx, t, c, srv, name)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, e2eP256Key(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true); err == nil {
		t.Fatal("the order was issued; want the program's refusal")
	}

	args, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("the program did not run: %v", err)
	}
	if want := "--token\n" + token + "\n"; string(args) != want {
		t.Errorf("the program was run with the arguments %q; want %q", args, want)
	}
	orderID := path.Base(o.URI)
	v, err := app.Operator().ShowOrder(ctx, orderID)
	if err != nil {
		t.Fatal(err)
	}
	const shown = "the backend refused token [redacted arg 2]"
	if !strings.Contains(v.FailureDetail, shown) {
		t.Errorf("the operator's failure detail is %q; want %q", v.FailureDetail, shown)
	}
	evs, err := app.db.SearchAudit(ctx, store.AuditFilter{OrderID: orderID})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := app.queue.List(ctx, store.JobFilter{Kind: script.IssueKind, Key: orderID})
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(env.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{
		"the failure detail": v.FailureDetail, "the audit rows": fmt.Sprintf("%+v", evs),
		"the jobs": fmt.Sprintf("%+v", jobs), "Caddy's log": string(log),
	} {
		if strings.Contains(s, token) {
			t.Errorf("%s carry the token: %s", what, s)
		}
	}
}
