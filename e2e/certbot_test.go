//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCertbot has Debian's certbot get a certificate from the built caddy
// with http-01 (certbot's standalone server answering the challenge), then
// renew it.
func TestCertbot(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	caddy := buildCaddy(t)

	const name = "cb.example.com"
	s := startCertbotServer(t, caddy, certbot, certbotSite{profile: "certbot"})
	admin, server, rootFile, root, cb := s.admin, s.server, s.rootFile, s.root, s.cb
	live := filepath.Join(cb.configDir, "live", name)

	cb.run(t, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", name)
	first := checkCertbotCert(t, live, root, name)

	cb.run(t, "renew", "--force-renewal", "--no-random-sleep-on-renew", "--cert-name", name)
	second := checkCertbotCert(t, live, root, name)
	if first.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Errorf("renewal kept serial %x; want a new certificate", first.SerialNumber)
	}
	if bytes.Equal(first.Raw, second.Raw) {
		t.Errorf("renewal left the certificate unchanged")
	}

	// Revocation: the renewed certificate by the account's key, a second
	// name's certificate by its own key; the first stays valid.
	const other = "cb2.example.com"
	cb.run(t, "certonly", "--standalone", "-d", other)
	otherLive := filepath.Join(cb.configDir, "live", other)
	third := checkCertbotCert(t, otherLive, root, other)
	cb.run(t, "revoke", "--cert-path", filepath.Join(live, "cert.pem"), "--reason", "keycompromise", "--no-delete-after-revoke")
	cb.run(t, "revoke", "--cert-path", filepath.Join(otherLive, "cert.pem"), "--key-path", filepath.Join(otherLive, "privkey.pem"),
		"--reason", "superseded", "--no-delete-after-revoke")

	crlURL := strings.TrimSuffix(server, "directory") + "crl"
	der := fetchCRL(t, crlURL, root, map[string]int{second.SerialNumber.Text(16): 1, third.SerialNumber.Text(16): 4})
	checkWithOpenSSL(t, der, rootFile, filepath.Join(live, "chain.pem"), map[string]*x509.Certificate{
		"renewed, revoked by the account key": second,
		"cb2, revoked by the certificate key": third,
		"first, never revoked":                first,
	}, map[*x509.Certificate]bool{second: true, third: true})

	// The binary's own CLI reads the audit trail over the admin API: one
	// revocation by the account, one by the certificate's key.
	out, err := exec.Command(caddy, "acme-proxy", "audit", "--event", "certificate_revoked", "--json", "--address", admin).CombinedOutput()
	if err != nil {
		t.Fatalf("caddy acme-proxy audit: %v\n%s", err, out)
	}
	var page struct {
		Items []struct {
			Serial string `json:"serial"`
			Actor  struct {
				Kind string `json:"kind"`
			} `json:"actor"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("caddy acme-proxy audit --json: %v\n%s", err, out)
	}
	actors := map[string]string{}
	for _, it := range page.Items {
		actors[it.Serial] = it.Actor.Kind
	}
	// The audit trail names a serial as its bytes in hex, leading zero
	// included (big.Int's Text(16) drops it: one serial in sixteen).
	auditSerial := func(c *x509.Certificate) string { return hex.EncodeToString(c.SerialNumber.Bytes()) }
	if actors[auditSerial(second)] != "acme_account" || actors[auditSerial(third)] != "certificate_key" || len(actors) != 2 {
		t.Errorf("revocations audited by %v; want the renewed one by acme_account and cb2's by certificate_key", actors)
	}
}

// fetchCRL GETs the CRL at url (over TLS verified against root) until it
// lists every serial (hex) with its reason, and returns its DER.
func fetchCRL(t *testing.T, url string, root *x509.Certificate, want map[string]int) []byte {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(root)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		der, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == "application/pkix-crl" {
			crl, err := x509.ParseRevocationList(der)
			if err != nil {
				t.Fatalf("the CRL does not parse: %v", err)
			}
			got := map[string]int{}
			for _, e := range crl.RevokedCertificateEntries {
				got[e.SerialNumber.Text(16)] = e.ReasonCode
			}
			ok := true
			for serial, reason := range want {
				r, listed := got[serial]
				ok = ok && listed && r == reason
			}
			if ok {
				return der
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d; the CRL never listed %v", url, resp.StatusCode, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkWithOpenSSL has openssl parse the DER CRL, then verify each leaf
// with -crl_check: the revoked ones must be rejected as revoked, the others
// accepted.
func checkWithOpenSSL(t *testing.T, crlDER []byte, rootFile, chainFile string, leaves map[string]*x509.Certificate, revoked map[*x509.Certificate]bool) {
	t.Helper()
	openssl := needTool(t, "openssl", "install it with `apt-get install --no-install-recommends openssl`")
	dir := t.TempDir()
	derFile, pemFile := filepath.Join(dir, "crl.der"), filepath.Join(dir, "crl.pem")
	if err := os.WriteFile(derFile, crlDER, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(openssl, "crl", "-inform", "DER", "-in", derFile, "-noout", "-text").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl crl -inform DER: %v\n%s", err, out)
	}
	if _, err := exec.Command(openssl, "crl", "-inform", "DER", "-in", derFile, "-out", pemFile).CombinedOutput(); err != nil {
		t.Fatalf("openssl crl: %v", err)
	}
	for _, reason := range []string{"Key Compromise", "Superseded"} {
		if !bytes.Contains(out, []byte(reason)) {
			t.Errorf("openssl's reading of the CRL lacks %q:\n%s", reason, out)
		}
	}
	for name, leaf := range leaves {
		leafFile := filepath.Join(dir, "leaf.pem")
		if err := os.WriteFile(leafFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(openssl, "verify", "-crl_check", "-CAfile", rootFile, "-untrusted", chainFile,
			"-CRLfile", pemFile, leafFile).CombinedOutput()
		switch {
		case revoked[leaf] && (err == nil || !bytes.Contains(out, []byte("certificate revoked"))):
			t.Errorf("%s: openssl verify -crl_check: %v; want it rejected as revoked\n%s", name, err, out)
		case !revoked[leaf] && err != nil:
			t.Errorf("%s: openssl verify -crl_check: %v; want it accepted\n%s", name, err, out)
		}
	}
}

// certbotRun runs certbot with its own directories and the flags every
// command shares.
type certbotRun struct {
	bin                         string
	env                         []string // added to the test's environment
	configDir, workDir, logsDir string
	common                      []string
}

// run runs `certbot <args>` with c's directories and common flags, and
// fails the test, with certbot's output and log, unless it exits 0.
func (c certbotRun) run(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	args = slices.Concat(args, []string{
		"--config-dir", c.configDir,
		"--work-dir", c.workDir,
		"--logs-dir", c.logsDir,
	}, c.common)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	inOwnGroup(cmd)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		logFile := filepath.Join(c.logsDir, "letsencrypt.log")
		log, lerr := os.ReadFile(logFile)
		if lerr != nil {
			log = []byte(lerr.Error())
		}
		t.Fatalf("certbot %s: %v\noutput:\n%s\n%s:\n%s", args[0], err, out, logFile, log)
	}
	t.Logf("certbot %s took %s", args[0], time.Since(start).Round(time.Millisecond))
}

// checkCertbotCert checks what certbot saved under live: a full chain
// that verifies up to root for name and names exactly name, and a
// private key that matches it. It returns the leaf.
func checkCertbotCert(t *testing.T, live string, root *x509.Certificate, name string) *x509.Certificate {
	t.Helper()
	return checkIssued(t, filepath.Join(live, "fullchain.pem"), filepath.Join(live, "privkey.pem"), root, name)
}

// checkIssued checks what a client saved: a full chain (fullchain, leaf
// first) that verifies up to root for name and names exactly name, valid
// now, and a private key (keyFile) that matches it. It returns the leaf.
func checkIssued(t *testing.T, fullchain, keyFile string, root *x509.Certificate, name string) *x509.Certificate {
	t.Helper()
	chain, err := readCerts(fullchain)
	if err != nil {
		t.Fatalf("the client's certificate: %v", err)
	}
	leaf := chain[0]
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		DNSName:       name,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Fatalf("%s does not verify up to caddy's local root for %s: %v", fullchain, name, err)
	}
	if !slices.Equal(leaf.DNSNames, []string{name}) || len(leaf.IPAddresses)+len(leaf.EmailAddresses)+len(leaf.URIs) != 0 {
		t.Errorf("%s names DNS %q, IP %v, email %q, URI %v; want exactly DNS %q",
			fullchain, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, leaf.URIs, name)
	}
	if _, err := tls.LoadX509KeyPair(fullchain, keyFile); err != nil {
		t.Errorf("the client's key and certificate: %v", err)
	}
	if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		t.Errorf("%s is valid %s to %s, not now (%s)", fullchain, leaf.NotBefore, leaf.NotAfter, now)
	}
	return leaf
}

// TestCertbotMustStapleIsRefusedWithTheReasonAndTheSameNameIssuesWithout
// has certbot ask for OCSP Must-Staple, which a local CA without an OCSP
// responder cannot give: the finalize is refused (badCSR) with the
// reason, where a leaf quietly without the extension would leave the
// operator believing stapling is enforced. Without the flag the same
// name issues.
func TestCertbotMustStapleIsRefusedWithTheReasonAndTheSameNameIssuesWithout(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	caddy := buildCaddy(t)

	const name = "staple.example.com"
	s := startCertbotServer(t, caddy, certbot, certbotSite{profile: "certbot"})
	out, err := s.cb.attempt(t, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email",
		"--must-staple", "-d", name)
	// Debian 12's certbot (2.1, with Python 3.11) prints an AttributeError
	// of its own for any ACME error at finalize; the server's problem is
	// in its log.
	log, lerr := os.ReadFile(filepath.Join(s.cb.logsDir, "letsencrypt.log"))
	if err == nil || lerr != nil || !bytes.Contains(log, []byte("urn:ietf:params:acme:error:badCSR")) || !bytes.Contains(log, []byte("OCSP Must-Staple")) {
		t.Fatalf("certbot --must-staple: %v\n%s\nits log (%v):\n%s\nwant a badCSR refusal naming OCSP Must-Staple", err, out, lerr, log)
	}
	if _, err := os.Stat(filepath.Join(s.cb.configDir, "live", name)); err == nil {
		t.Errorf("certbot saved a certificate for %s from the refused request", name)
	}

	s.cb.run(t, "certonly", "--standalone", "-d", name)
	checkCertbotCert(t, filepath.Join(s.cb.configDir, "live", name), s.root, name)
}

// TestCertbotRenewsASevenDayCertificateAtEveryRunUntilItsRenewalConfigSaysOtherwise
// pins down what the README says of Debian 12's certbot (2.1), which has
// no ARI: `certbot renew` renews a certificate with fewer than 30 days
// left (its renew_before_expiry), so a local CA's 7-day leaf at every
// run; with `renew_before_expiry = 2 days` in the certificate's renewal
// config it waits.
func TestCertbotRenewsASevenDayCertificateAtEveryRunUntilItsRenewalConfigSaysOtherwise(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	caddy := buildCaddy(t)

	const name = "renew.example.com"
	s := startCertbotServer(t, caddy, certbot, certbotSite{profile: "certbot"})
	live := filepath.Join(s.cb.configDir, "live", name)
	s.cb.run(t, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", name)
	first := checkCertbotCert(t, live, s.root, name)
	if left := time.Until(first.NotAfter); left > 7*24*time.Hour || left < 6*24*time.Hour {
		t.Fatalf("the leaf has %s left; want about the local CA's 7 days", left)
	}

	s.cb.run(t, "renew", "--no-random-sleep-on-renew")
	second := checkCertbotCert(t, live, s.root, name)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("certbot renew kept serial %x with %s left; want it renewed (fewer than 30 days left)",
			first.SerialNumber, time.Until(first.NotAfter).Round(time.Minute))
	}

	conf := filepath.Join(s.cb.configDir, "renewal", name+".conf")
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	const commented = "# renew_before_expiry = 30 days"
	if !bytes.Contains(text, []byte(commented)) {
		t.Fatalf("%s lacks %q:\n%s", conf, commented, text)
	}
	text = bytes.Replace(text, []byte(commented), []byte("renew_before_expiry = 2 days"), 1)
	if err := os.WriteFile(conf, text, 0o600); err != nil {
		t.Fatal(err)
	}
	s.cb.run(t, "renew", "--no-random-sleep-on-renew")
	if third := checkCertbotCert(t, live, s.root, name); third.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Errorf("certbot renew with renew_before_expiry = 2 days renewed serial %x (%s left) into %x; want it kept",
			second.SerialNumber, time.Until(second.NotAfter).Round(time.Minute), third.SerialNumber)
	}
}

// TestCertbotCannotRenewWithAKeyItRevokedForKeyCompromise has certbot
// revoke a certificate with its own key for keyCompromise, then renew
// with --reuse-key: the finalize is refused (badCSR), since a key known
// compromised is not certified again; renewing with a new key succeeds.
func TestCertbotCannotRenewWithAKeyItRevokedForKeyCompromise(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	caddy := buildCaddy(t)

	const name = "compromised.example.com"
	s := startCertbotServer(t, caddy, certbot, certbotSite{profile: "certbot"})
	live := filepath.Join(s.cb.configDir, "live", name)
	s.cb.run(t, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", name)
	first := checkCertbotCert(t, live, s.root, name)
	s.cb.run(t, "revoke", "--cert-path", filepath.Join(live, "cert.pem"), "--key-path", filepath.Join(live, "privkey.pem"),
		"--reason", "keycompromise", "--no-delete-after-revoke")

	out, err := s.cb.attempt(t, "renew", "--force-renewal", "--reuse-key", "--no-random-sleep-on-renew")
	log, lerr := os.ReadFile(filepath.Join(s.cb.logsDir, "letsencrypt.log"))
	if err == nil || lerr != nil || !bytes.Contains(log, []byte("urn:ietf:params:acme:error:badCSR")) || !bytes.Contains(log, []byte("revoked for keyCompromise")) {
		t.Fatalf("certbot renew --reuse-key: %v\n%s\nits log (%v):\n%s\nwant a badCSR refusal of the compromised key", err, out, lerr, log)
	}
	if again := checkCertbotCert(t, live, s.root, name); again.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Errorf("certbot renew --reuse-key got serial %x for the compromised key", again.SerialNumber)
	}

	s.cb.run(t, "renew", "--force-renewal", "--no-random-sleep-on-renew")
	renewed := checkCertbotCert(t, live, s.root, name)
	if bytes.Equal(renewed.RawSubjectPublicKeyInfo, first.RawSubjectPublicKeyInfo) {
		t.Errorf("the renewal with a new key certified the compromised key")
	}
}
