package webui

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/delegated"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// issued gives the fixture a valid order with a certificate and returns
// the order's id.
func (f *fixture) issued(t *testing.T) string {
	t.Helper()
	return f.issuedFor(t, "www.example.test", big.NewInt(0x1234567))
}

// issuedFor gives the fixture a valid order for name with a certificate
// of serial and returns the order's id.
func (f *fixture) issuedFor(t *testing.T, name string, serialNumber *big.Int) string {
	t.Helper()
	return f.issuedBy(t, name, serialNumber, "")
}

// issuedBy is issuedFor with the certificate's issuer key id as stored
// ("" as before the store recorded it).
func (f *fixture) issuedBy(t *testing.T, name string, serialNumber *big.Int, issuerKeyID string) string {
	t.Helper()
	ctx := context.Background()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: serialNumber, Subject: pkix.Name{CommonName: "issued"},
		DNSNames: []string{name}, NotBefore: t0.Add(-time.Minute), NotAfter: t0.Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	id := acme.Identifier{Type: "dns", Value: name}
	o, err := f.db.CreateOrder(ctx, store.Order{Profile: "test", AccountID: f.account, Identifiers: []acme.Identifier{id}, Expires: t0.Add(time.Hour)},
		[]store.Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []store.Challenge{{Type: "http-01", Token: store.NewID()}}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.db.GetAuthz(ctx, "test", o.AuthzIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, t0); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, store.OrderClient{}, "", t0); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	serial := hex.EncodeToString(tmpl.SerialNumber.Bytes())
	if _, err := f.db.IssueOrder(ctx, store.Certificate{OrderID: o.ID, Profile: "test", AccountID: f.account, Serial: serial,
		ChainPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), PublicKey: []byte{1},
		NotBefore: tmpl.NotBefore, NotAfter: tmpl.NotAfter, IssuerKeyID: issuerKeyID},
		store.AuditEvent{At: t0, Event: acme.EventCertificateIssued, Outcome: "success", Serial: serial}, t0); err != nil {
		t.Fatal(err)
	}
	return o.ID
}

// The web page offers every reason an operator may give — privilegeWithdrawn
// too, which the admin API and the CLI take — and names each on the order's
// page once the certificate is revoked with it.
func TestTheRevokePageOffersEveryReasonAnOperatorMayGiveAndTheOrderNamesIt(t *testing.T) {
	tests := []struct {
		name, code, shown string
	}{
		{"unspecified", "0", "reason unspecified"},
		{"keyCompromise", "1", "reason keyCompromise"},
		{"affiliationChanged", "3", "reason affiliationChanged"},
		{"superseded", "4", "reason superseded"},
		{"cessationOfOperation", "5", "reason cessationOfOperation"},
		{"privilegeWithdrawn, which only an operator may give", "9", "reason privilegeWithdrawn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			order := f.issued(t)
			page := f.get(t, "/ops/orders/"+order+"/revoke")
			if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), `<option value="`+tt.code+`">`) {
				t.Fatalf("status %d; the revoke page offers no reason %s:\n%s", page.Code, tt.code, page.Body)
			}
			if w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {tt.code}}, nil); w.Code != http.StatusSeeOther {
				t.Fatalf("revoking with reason %s: status %d: %s", tt.code, w.Code, w.Body)
			}
			if page := f.get(t, "/ops/orders/"+order); !strings.Contains(page.Body.String(), tt.shown) {
				t.Errorf("the order's page does not say %q:\n%s", tt.shown, page.Body)
			}
		})
	}
}

// A certificate revoked for another reason whose key is found compromised
// later is marked so from the page, as the admin API and the CLI do it:
// the order's page offers it, the confirmation offers keyCompromise alone,
// and the change is done and said; once the reason is keyCompromise there
// is nothing more to offer.
func TestACertificateRevokedForAnotherReasonIsMarkedKeyCompromisedFromThePage(t *testing.T) {
	f := newFixture(t, false)
	order := f.issued(t)
	if w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"4"}}, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("revoking: status %d: %s", w.Code, w.Body)
	}
	if page := f.get(t, "/ops/orders/"+order).Body.String(); !strings.Contains(page, `id="key-compromise"`) {
		t.Fatalf("the page of a certificate revoked as superseded offers no way to mark its key compromised:\n%s", page)
	}
	confirm := f.get(t, "/ops/orders/"+order+"/revoke").Body.String()
	if strings.Count(confirm, "<option") != 1 || !strings.Contains(confirm, `<option value="1">`) {
		t.Errorf("the confirmation offers other reasons than keyCompromise:\n%s", confirm)
	}
	w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"1"}}, nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ops/orders/"+order+"?done=key-compromise" {
		t.Fatalf("status %d to %q, want 303 to the order saying the reason changed: %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	page := f.get(t, "/ops/orders/"+order+"?done=key-compromise").Body.String()
	if !strings.Contains(page, "reason keyCompromise") || !strings.Contains(page, doneText["key-compromise"]) {
		t.Errorf("the order's page does not say the reason is now keyCompromise:\n%s", page)
	}
	if strings.Contains(page, `id="key-compromise"`) {
		t.Errorf("the page of a certificate revoked for keyCompromise still offers to mark it so")
	}
}

// A confirmation page is offered only for a change the order allows: one
// whose certificate cannot be revoked (none yet) or re-reasoned (revoked for
// keyCompromise already) is answered 409 saying why, as its POST would be.
func TestTheRevokePageOfAnOrderThatCannotBeRevokedSaysWhy(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, f *fixture) string
		why   string
	}{
		{"an order without a certificate", func(t *testing.T, f *fixture) string { return f.order }, "has no certificate"},
		{"a certificate revoked for keyCompromise already", func(t *testing.T, f *fixture) string {
			order := f.issued(t)
			if w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"1"}}, nil); w.Code != http.StatusSeeOther {
				t.Fatalf("revoking: status %d: %s", w.Code, w.Body)
			}
			return order
		}, "already revoked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			order := tt.setup(t, f)
			w := f.get(t, "/ops/orders/"+order+"/revoke")
			if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), tt.why) || strings.Contains(w.Body.String(), "<form") {
				t.Errorf("status %d, want 409 saying %q and no form:\n%s", w.Code, tt.why, w.Body)
			}
		})
	}
}

// The audit page names a revocation's reason beside its code, as the
// order's page does, so an operator need not know RFC 5280's numbers.
func TestTheAuditPageNamesARevocationsReason(t *testing.T) {
	f := newFixture(t, false)
	order := f.issued(t)
	if w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"4"}}, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", w.Code, w.Body)
	}
	if w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"1"}}, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("mark key compromised: %d %s", w.Code, w.Body)
	}
	body := f.get(t, "/ops/audit").Body.String()
	for _, want := range []string{"<td>4 (superseded)</td>", "<td>1 (keyCompromise) — reason changed from 4 (superseded) to 1 (keyCompromise)</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the audit page lacks %q:\n%s", want, body)
		}
	}
}

// backendSigner revokes at a backend, through a signer_revoke job.
type backendSigner struct{ stubSigner }

func (backendSigner) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

// A revocation the signer's backend has not confirmed within the request
// (its signer_revoke job still waits: here no runner runs it) is not
// announced as done: the order's page says it is queued, and still shows
// the certificate not revoked, as the admin API answers 202 "queued".
func TestARevocationTheBackendHasNotConfirmedIsShownQueuedNotRevoked(t *testing.T) {
	f := newFixture(t, false)
	order := f.issued(t)
	clk := clocktest.New(t0)
	au, err := authority.New(authority.Config{Profile: "test", Prefix: "/acme"}, authority.Options{DB: f.db, Queue: jobs.NewQueue(f.db, clk),
		Signer: backendSigner{}, Validator: stubValidator{}, Clock: clk, RevokeWait: 50 * time.Millisecond,
		LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	f.ui.cfg.Operator = &operator.Operator{DB: f.db, Queue: jobs.NewQueue(f.db, clk), Profiles: profiles{au}, Clock: clk}
	w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"4"}}, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("the revocation answered %d, want 303: %s", w.Code, w.Body)
	}
	page := f.get(t, w.Header().Get("Location")).Body.String()
	done := regexp.MustCompile(`<p class="done" role="status">(.*?)</p>`).FindStringSubmatch(page)
	if done == nil || !strings.Contains(done[1], "queued") || strings.Contains(done[1], "was revoked") {
		t.Errorf("after a revocation still queued the page says %q; want that it is queued, not that it was revoked", done)
	}
	if !strings.Contains(page, "not revoked") {
		t.Errorf("the order's page does not show the certificate not revoked yet:\n%s", page)
	}
}

// A front end (signer delegated) records a revocation in the ledger when
// its workers' signer is a local CA, and an operator may change its reason
// to keyCompromise there as at the worker: its page offers it, though the
// profile list says the front end's revocation is "delegated". A backend's
// revocation (relay, script), or one whose route no worker has published
// yet, is not offered.
func TestAFrontEndsOrderPageOffersKeyCompromiseWhenItsWorkersRecordRevocationsInTheLedger(t *testing.T) {
	tests := []struct {
		name  string
		route string // the route the workers published; "" none yet
		offer bool
	}{
		{"ok/workers with a local CA: offered", store.RevocationLedger, true},
		{"ok/workers revoking at a backend: not offered", store.RevocationJob, false},
		{"ok/no worker published yet: not offered", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			order := f.issued(t)
			if w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"4"}}, nil); w.Code != http.StatusSeeOther {
				t.Fatalf("revoking: status %d: %s", w.Code, w.Body)
			}
			ctx := context.Background()
			if tc.route != "" {
				if err := f.db.PublishSigner(ctx, store.SignerPublication{Profile: "test", Signer: "worker", Revocation: tc.route, UpdatedAt: t0}); err != nil {
					t.Fatal(err)
				}
			}
			f.frontEnd(t)
			page := f.get(t, "/ops/orders/"+order).Body.String()
			if got := strings.Contains(page, `id="key-compromise"`); got != tc.offer {
				t.Errorf("the front end's page of a certificate revoked as superseded offers keyCompromise: %v; want %v", got, tc.offer)
			}
			if !tc.offer {
				return
			}
			w := f.post(t, "/ops/orders/"+order+"/do-revoke", url.Values{"reason": {"1"}}, nil)
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ops/orders/"+order+"?done=key-compromise" {
				t.Errorf("status %d to %q, want 303 to the order saying the reason changed: %s", w.Code, w.Header().Get("Location"), w.Body)
			}
		})
	}
}

// frontEnd makes the fixture's page that of a front end: its profile is
// mounted with signer delegated, on the same database.
func (f *fixture) frontEnd(t *testing.T) {
	t.Helper()
	clk := clocktest.New(t0)
	q := jobs.NewQueue(f.db, clk)
	au, err := authority.New(authority.Config{Profile: "test", Prefix: "/acme"}, authority.Options{DB: f.db, Queue: q, Signer: new(delegated.Signer),
		Validator: stubValidator{}, Clock: clk, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ui, err := New(Config{Operator: &operator.Operator{DB: f.db, Queue: q, Profiles: profiles{au}, Clock: clk}, Prefix: "/ops",
		CSRFKey: []byte("test key"), User: func(r *http.Request) string { return r.Header.Get("X-Test-User") }})
	if err != nil {
		t.Fatal(err)
	}
	f.ui = ui
}
