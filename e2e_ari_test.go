package caddyacmeproxy

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// replacesOf is the "replaces" of the order a lego certificate resource
// came from, as the proxy stored it.
func replacesOf(t *testing.T, ctx context.Context, db *store.DB, profile string, res *certificate.Resource) string {
	t.Helper()
	c, err := db.GetCertificate(ctx, profile, path.Base(res.CertURL))
	if err != nil {
		t.Fatalf("the certificate of %s: %v", res.CertURL, err)
	}
	o, err := db.GetOrder(ctx, profile, c.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	return o.Replaces
}

// lego v5 reads renewalInfo (RFC 9773) and renews with "replaces": its
// window lies ahead until an operator asks for renewal with
// `caddy acme-proxy renew-early`, then it says "renew now" with the
// operator's explanation; the renewal replaces the certificate once, and
// a second renewal of the same certificate is refused alreadyReplaced,
// which lego answers by ordering without "replaces".
func TestLegoRenewsWhenRenewalInfoSaysSoAndItsOrderReplacesTheCertificateOnce(t *testing.T) {
	httpPort := freePort(t)
	b := newRevokeBench(t, httpPort)
	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	lego := newE2ELego(t, b.env)
	if err := lego.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
		t.Fatal(err)
	}
	first, err := lego.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{"ari.example.com"}, Bundle: true, KeyType: certcrypto.EC256})
	if err != nil {
		t.Fatalf("lego Obtain: %v", err)
	}
	leaf, err := x509.ParseCertificate(e2ePEMChain(t, first.Certificate)[0])
	if err != nil {
		t.Fatal(err)
	}

	// A fresh certificate: renew later, within its life.
	info, err := lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo: %v", err)
	}
	now := time.Now()
	if at := info.ShouldRenewAt(now, 0); at != nil {
		t.Errorf("lego would renew a fresh certificate at %v; its window is %v – %v", at, info.SuggestedWindow.Start, info.SuggestedWindow.End)
	}
	if !info.SuggestedWindow.Start.After(now) || !info.SuggestedWindow.End.Before(leaf.NotAfter) {
		t.Errorf("window %v – %v; want one ahead, within the certificate's life (until %v)", info.SuggestedWindow.Start, info.SuggestedWindow.End, leaf.NotAfter)
	}
	if info.RetryAfter != 6*time.Hour {
		t.Errorf("Retry-After %v; want the default 6h", info.RetryAfter)
	}

	// The admin API refuses a request that selects nothing or says what
	// it does not understand, and stamps nothing.
	for _, body := range []string{`{}`, `{"explanation_url": "https://status.example.com/"}`, `{"serial": "01"}`, `not json`} {
		if status, out := b.adminCall(t, http.MethodPost, "/acme_proxy/renew-early", body); status != http.StatusBadRequest {
			t.Errorf("POST renew-early %s: %d %s; want 400", body, status, out)
		}
	}
	if status, _ := b.adminCall(t, http.MethodGet, "/acme_proxy/renew-early", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET renew-early: %d; want 405", status)
	}
	// The operator asks the certificates of this name to renew now.
	const why = "https://status.example.com/rotate-intermediate"
	serial := strings.ToUpper(leaf.SerialNumber.Text(16))
	out, err := b.cliRun("renew-early", "--serial", serial, "--explanation-url", why, "--json")
	var v operator.RenewEarlyView
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || len(v.Certificates) != 1 || v.Certificates[0].Order == "" {
		t.Fatalf("renew-early --serial %s: %v\n%s", serial, err, out)
	}
	info, err = lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo after renew-early: %v", err)
	}
	if at := info.ShouldRenewAt(time.Now(), 0); at == nil || at.After(time.Now()) {
		t.Errorf("after renew-early lego would renew at %v; want now (window %v – %v)", at, info.SuggestedWindow.Start, info.SuggestedWindow.End)
	}
	if info.ExplanationURL != why {
		t.Errorf("explanationURL %q, want %q", info.ExplanationURL, why)
	}
	status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/audit?event="+acme.EventRenewEarly+"&serial="+strings.ToLower(serial), "")
	var audit operator.Page[operator.AuditView]
	if status != http.StatusOK || json.Unmarshal(body, &audit) != nil || len(audit.Items) != 1 || audit.Items[0].Actor.Kind != "cli" {
		t.Errorf("the audit trail of the renew-early: %d %s; want one row by the cli", status, body)
	}

	// lego renews, naming the certificate it replaces.
	db := activeApp(t).db
	certID, err := api.MakeARICertID(leaf)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := lego.Certificate.Renew(ctx, *first, &certificate.RenewOptions{Bundle: true, KeyType: certcrypto.EC256, UseARICertID: true})
	if err != nil {
		t.Fatalf("lego Renew: %v", err)
	}
	if got := replacesOf(t, ctx, db, e2eProfile, renewed); got != certID {
		t.Errorf("the renewal's order replaces %q, want %q", got, certID)
	}
	// Renewing the same certificate again: the proxy refuses the second
	// replacement (alreadyReplaced) and lego orders without it.
	again, err := lego.Certificate.Renew(ctx, *first, &certificate.RenewOptions{Bundle: true, KeyType: certcrypto.EC256, UseARICertID: true})
	if err != nil {
		t.Fatalf("lego Renew, again: %v", err)
	}
	if got := replacesOf(t, ctx, db, e2eProfile, again); got != "" {
		t.Errorf("a second renewal's order replaces %q; want none (the certificate was already replaced)", got)
	}
}

// A script signer's certificates (an outside CA, here the example
// openssl CA) get renewal information too: the window in the last third
// of their life, found under the outside CA's key identifier; a renewal
// replaces the certificate; once revoked, lego renews at once.
func TestLegoReadsTheRenewalWindowOfAScriptSignedCertificateAndRenewsIt(t *testing.T) {
	env := newE2EEnv(t)
	caDir := filepath.Join(env.Dir, "ca")
	example := exampleScriptCA(t, caDir)
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(e2ePEMChain(t, caPEM)[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("E2E_SCRIPT_CA_DIR", caDir)
	httpPort := freePort(t)
	env.load(t, e2eConfig{ValidationHTTP: httpPort, ValidationTLS: freePort(t),
		ExtraProfiles: scriptProfileBlock(env, httpPort, "\t\t\tcommand "+example+"\n\t\t\ttimeout 30s\n\t\t\tenv CA_DIR {env.E2E_SCRIPT_CA_DIR}")})
	ctx, cancel := context.WithTimeout(t.Context(), 3*e2eWait)
	defer cancel()
	lego := newE2ELegoAt(t, env, scriptProfile)
	if err := lego.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
		t.Fatal(err)
	}
	first, err := lego.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{"ari-script.example.com"}, Bundle: true, KeyType: certcrypto.EC256})
	if err != nil {
		t.Fatalf("lego Obtain: %v", err)
	}
	leaf, err := x509.ParseCertificate(e2ePEMChain(t, first.Certificate)[0])
	if err != nil {
		t.Fatal(err)
	}
	db := activeApp(t).db
	found, err := db.CertificatesBySerial(ctx, scriptProfile, hex.EncodeToString(leaf.SerialNumber.Bytes()))
	if err != nil || len(found) != 1 {
		t.Fatalf("the certificates with serial %x: %d, %v; want 1", leaf.SerialNumber, len(found), err)
	}
	stored := found[0]
	if want := hex.EncodeToString(ca.SubjectKeyId); stored.IssuerKeyID != want {
		t.Errorf("the certificate is stored as issued by %q, want the outside CA's key id %q", stored.IssuerKeyID, want)
	}

	info, err := lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo: %v", err)
	}
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	lo, hi := leaf.NotBefore.Add(life*6/10), leaf.NotBefore.Add(life*7/10)
	if w := info.SuggestedWindow; w.Start.Before(lo) || w.End.After(hi) || !w.End.After(w.Start) {
		t.Errorf("window %v – %v; want one around two thirds of the life (%v – %v)", w.Start, w.End, lo, hi)
	}
	if at := info.ShouldRenewAt(time.Now(), 0); at != nil {
		t.Errorf("lego would renew a fresh certificate at %v", at)
	}

	certID, err := api.MakeARICertID(leaf)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := lego.Certificate.Renew(ctx, *first, &certificate.RenewOptions{Bundle: true, KeyType: certcrypto.EC256, UseARICertID: true})
	if err != nil {
		t.Fatalf("lego Renew: %v", err)
	}
	if got := replacesOf(t, ctx, db, scriptProfile, renewed); got != certID {
		t.Errorf("the renewal's order replaces %q, want %q", got, certID)
	}

	reason := uint(4)
	if err := lego.Certificate.RevokeWithReason(ctx, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), &reason); err != nil {
		t.Fatalf("lego RevokeWithReason: %v", err)
	}
	info, err = lego.Certificate.GetRenewalInfo(ctx, leaf)
	if err != nil {
		t.Fatalf("lego GetRenewalInfo of the revoked certificate: %v", err)
	}
	if at := info.ShouldRenewAt(time.Now(), 0); at == nil || at.After(time.Now()) {
		t.Errorf("lego would renew the revoked certificate at %v; want now (window %v – %v)", at, info.SuggestedWindow.Start, info.SuggestedWindow.End)
	}
}
