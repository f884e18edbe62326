package caddyacmeproxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// newEABBench serves the e2e profile and a profile "bound" that requires
// an external account binding, with the admin endpoint on.
func newEABBench(t *testing.T) *revokeBench {
	t.Helper()
	env := newE2EEnv(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin,
		ExtraProfiles: "acme_proxy {\nprofile bound\neab required\n}"})
	unloadAdminOnCleanup(t)
	return b
}

// mintByCLI mints a key with `caddy acme-proxy eab create`.
func (b *revokeBench) mintByCLI(t *testing.T, args ...string) operator.MintedEABKey {
	t.Helper()
	out, err := b.cliRun(append([]string{"eab", "create", "--profile", "bound", "--json"}, args...)...)
	var k operator.MintedEABKey
	if err != nil || json.Unmarshal([]byte(out), &k) != nil || k.KID == "" || k.HMACKey == "" {
		t.Fatalf("eab create: %v %s", err, out)
	}
	return k
}

func legoFor(t *testing.T, b *revokeBench) (*lego.Client, *e2eLegoUser) {
	t.Helper()
	user := &e2eLegoUser{key: e2eP256Key(t)}
	cfg := lego.NewConfig(user)
	cfg.CADirURL = b.env.directoryURL("bound")
	cfg.HTTPClient = b.env.client
	c, err := lego.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, user
}

func TestClientsRegisterWithAnOperatorMintedBindingKey(t *testing.T) {
	b := newEABBench(t)
	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()

	// lego, without a binding: refused.
	lc, _ := legoFor(t, b)
	if _, err := lc.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true}); err == nil ||
		!strings.Contains(err.Error(), "externalAccountRequired") {
		t.Fatalf("lego without EAB: %v; want externalAccountRequired", err)
	}
	// lego, with a key minted by the CLI: registered.
	k := b.mintByCLI(t, "--label", "lego-team", "--expires", "7d")
	if k.Expires == nil || k.Reusable {
		t.Errorf("minted %+v; want single-use with an expiry", k.EABKeyView)
	}
	lc, user := legoFor(t, b)
	reg, err := lc.Registration.RegisterWithExternalAccountBinding(ctx, registration.RegisterEABOptions{
		TermsOfServiceAgreed: true, Kid: k.KID, HmacEncoded: k.HMACKey})
	if err != nil {
		t.Fatalf("lego with EAB: %v", err)
	}
	user.reg = reg
	// The same key again, from x/crypto/acme: refused, it is single-use.
	hmacKey, _ := base64.RawURLEncoding.DecodeString(k.HMACKey)
	xc := &xacme.Client{Key: e2eP256Key(t), HTTPClient: b.env.client, DirectoryURL: b.env.directoryURL("bound")}
	_, err = xc.Register(ctx, &xacme.Account{ExternalAccountBinding: &xacme.ExternalAccountBinding{KID: k.KID, Key: hmacKey}}, xacme.AcceptTOS)
	var ae *xacme.Error
	if !errors.As(err, &ae) || ae.ProblemType != string(acme.ErrorUnauthorized) {
		t.Fatalf("x/crypto/acme reusing a single-use key: %v; want unauthorized", err)
	}
	// x/crypto/acme with a reusable key of its own: registered.
	k2 := b.mintByCLI(t, "--label", "xcrypto-fleet", "--reusable")
	hmac2, _ := base64.RawURLEncoding.DecodeString(k2.HMACKey)
	for i := range 2 {
		xc := &xacme.Client{Key: e2eP256Key(t), HTTPClient: b.env.client, DirectoryURL: b.env.directoryURL("bound")}
		if _, err := xc.Register(ctx, &xacme.Account{ExternalAccountBinding: &xacme.ExternalAccountBinding{KID: k2.KID, Key: hmac2}}, xacme.AcceptTOS); err != nil {
			t.Fatalf("x/crypto/acme account %d with a reusable key: %v", i, err)
		}
	}

	// The listing shows state and bound account, never a MAC key.
	out, err := b.cliRun("eab", "list", "--profile", "bound")
	if err != nil || !strings.Contains(out, k.KID) || !strings.Contains(out, "bound") || !strings.Contains(out, "in_use") ||
		strings.Contains(out, k.HMACKey) || strings.Contains(out, k2.HMACKey) {
		t.Fatalf("eab list: %v\n%s", err, out)
	}
	status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/eab?profile=bound", "")
	if status != 200 || strings.Contains(string(body), k.HMACKey) || strings.Contains(string(body), "hmac") {
		t.Fatalf("GET eab: %d %s", status, body)
	}
	// The account keeps the binding's label.
	status, body = b.adminCall(t, http.MethodGet, "/acme_proxy/accounts?profile=bound", "")
	if status != 200 || !strings.Contains(string(body), `"eab_label": "lego-team"`) {
		t.Fatalf("accounts: %d %s; want one labelled lego-team", status, body)
	}

	if out, err := b.cliRun("accounts", "--profile", "bound"); err != nil || !strings.Contains(out, "lego-team") {
		t.Fatalf("accounts table: %v\n%s; want the label lego-team", err, out)
	}
	// So do its audit rows.
	var accts operator.Page[operator.AccountView]
	if err := json.Unmarshal(body, &accts); err != nil {
		t.Fatal(err)
	}
	var legoAcct string
	for _, a := range accts.Items {
		if a.EABLabel == "lego-team" {
			legoAcct = a.ID
		}
	}
	if out, err := b.cliRun("accounts", "deactivate", legoAcct); err != nil {
		t.Fatalf("deactivate: %v %s", err, out)
	}
	status, body = b.adminCall(t, http.MethodGet, "/acme_proxy/audit?event=account_deactivated&account="+legoAcct, "")
	var audit operator.Page[operator.AuditView]
	if status != 200 || json.Unmarshal(body, &audit) != nil || len(audit.Items) != 1 || audit.Items[0].AccountEABLabel != "lego-team" {
		t.Fatalf("audit of the bound account: %d %s; want its row labelled lego-team", status, body)
	}

	// Revoked by the CLI, the reusable key binds nothing new.
	if out, err := b.cliRun("eab", "revoke", k2.KID); err != nil || !strings.Contains(out, "revoked EAB key "+k2.KID) {
		t.Fatalf("eab revoke: %v %s", err, out)
	}
	xc = &xacme.Client{Key: e2eP256Key(t), HTTPClient: b.env.client, DirectoryURL: b.env.directoryURL("bound")}
	if _, err := xc.Register(ctx, &xacme.Account{ExternalAccountBinding: &xacme.ExternalAccountBinding{KID: k2.KID, Key: hmac2}}, xacme.AcceptTOS); !errors.As(err, &ae) ||
		!strings.Contains(ae.Detail, "binds no new account") {
		t.Fatalf("a revoked key: %v; want refused", err)
	}
	if _, err := b.cliRun("eab", "revoke", k2.KID); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("revoking twice: %v; want HTTP 409", err)
	}

	// Neither MAC key is in Caddy's log or in any audit row.
	log, err := os.ReadFile(b.env.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := activeApp(t).db.SearchAudit(context.Background(), store.AuditFilter{Profile: "bound"})
	if err != nil || len(rows) < 4 {
		t.Fatalf("audit rows: %d %v", len(rows), err)
	}
	trail := fmt.Sprintf("%+v", rows)
	for _, mac := range []string{k.HMACKey, k2.HMACKey} {
		if strings.Contains(string(log), mac) || strings.Contains(trail, mac) {
			t.Errorf("a MAC key is in Caddy's log or the audit trail")
		}
	}
	if !strings.Contains(trail, acme.EventAccountBindingRefused) || !strings.Contains(trail, acme.EventEABKeyCreated) {
		t.Errorf("audit trail lacks the minting or the refusals: %s", trail)
	}
}

// Key ids minted before they were kept from beginning with "-" may; the
// CLI revokes one named after "--", as its usage says.
func TestTheCLIRevokesAnOlderKeyIDThatBeginsWithADashNamedAfterDoubleDash(t *testing.T) {
	b := newEABBench(t)
	const kid = "-older-key-id-with-dash"
	if err := activeApp(t).db.CreateEABKey(t.Context(), store.EABKey{KID: kid, Profile: "bound", Label: "older",
		HMACKey: make([]byte, 32), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if out, err := b.cliRun("eab", "revoke", "--", kid); err != nil || !strings.Contains(out, "revoked EAB key "+kid) {
		t.Fatalf("eab revoke -- %s: %v %s", kid, err, out)
	}
}

func TestAnEABKeyThatCannotBeMintedAsAskedIsRefusedAndNoneIsLeft(t *testing.T) {
	b := newEABBench(t)
	tests := []struct {
		name, body string
		want       int
		wantErr    string
	}{
		{"a label with a line break", `{"profile":"bound","label":"team\nforged row"}`, 400, "control characters"},
		{"a label with a NUL", `{"profile":"bound","label":"team\u0000"}`, 400, "control characters"},
		{"a blank label", `{"profile":"bound","label":"   "}`, 400, "not only blanks"},
		{"more after the body", `{"profile":"bound","label":"team"} {"oops"`, 400, "nothing after it"},
		{"a body past the limit", `{"profile":"bound","label":"` + strings.Repeat("a", 64<<10) + `"}`, 413, "larger than"},
		{"a profile this instance does not serve", `{"profile":"nope","label":"team"}`, 404, `profile \"nope\" (this instance serves bound, e2e)`},
		{"a profile that takes no bindings", `{"profile":"e2e","label":"team"}`, 409, "takes no external account bindings"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := b.adminCall(t, http.MethodPost, "/acme_proxy/eab/create", tc.body)
			if status != tc.want || !strings.Contains(string(body), tc.wantErr) {
				t.Fatalf("POST eab/create %s: %d %s; want %d with %q", tc.name, status, body, tc.want, tc.wantErr)
			}
		})
	}
	for _, profile := range []string{"bound", "e2e", "nope"} {
		keys, err := activeApp(t).db.ListEABKeys(t.Context(), store.EABKeyFilter{Profile: profile})
		if err != nil || len(keys) != 0 {
			t.Fatalf("keys of %s after the refusals: %d %v; want none", profile, len(keys), err)
		}
	}
}
