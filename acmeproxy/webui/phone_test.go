package webui

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/browsertest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// longToken is an unbroken run of n characters that no browser breaks at
// a space or a hyphen: a stand-in for a DNS name, a URL or a key.
func longToken(prefix string, n int) string {
	return (prefix + strings.Repeat("x", n))[:n]
}

// longName is a DNS name of 253 characters, the longest there is.
func longName() string {
	label := strings.Repeat("a", 63)
	return label + "." + label + "." + label + "." + strings.Repeat("b", 56) + ".test"
}

// seedLongValues gives the fixture every long value an operator's page
// shows: a 253-character identifier, a 20-octet serial, an account with a
// long id and contact, a failed order whose problem and failure detail are
// one long token each, a failed job with a long kind, key and error, and
// failure audit rows with long identifiers and details, a ready job of a
// long kind nobody here runs, and a cancelled one of another such kind
// still owing its Abandon. It returns the
// pages that show them.
func (f *fixture) seedLongValues(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	name := longName()
	if len(name) != 253 {
		t.Fatalf("the long name is %d characters", len(name))
	}
	url := "https://acme.upstream.example/acme/acct/" + longToken("", 200)
	acct, _, err := f.db.CreateAccount(ctx, store.Account{ID: longToken("acct-", 200), Profile: "test", Thumbprint: longToken("tp", 43),
		KeyJWK: []byte(`{}`), Status: acme.StatusValid, Contact: []string{"mailto:" + longToken("ops", 180) + "@example.test"}}, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := acme.Identifier{Type: "dns", Value: name}
	o, err := f.db.CreateOrder(ctx, store.Order{Profile: "test", AccountID: acct.ID, Status: acme.StatusPending,
		Identifiers: []acme.Identifier{id, {Type: "dns", Value: "www." + name[4:]}}, Expires: t0.Add(time.Hour)},
		[]store.Authz{{Identifier: id, Expires: t0.Add(time.Hour), Challenges: []store.Challenge{{Type: "dns-01", Token: store.NewID()}}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	problem := fmt.Sprintf(`{"type":"urn:ietf:params:acme:error:serverInternal","detail":"the upstream account %s answered %s","status":500,`+
		`"subproblems":[{"type":"urn:ietf:params:acme:error:dns","detail":"no TXT at _acme-challenge.%s","identifier":{"type":"dns","value":%q}}]}`,
		url, longToken("detail", 200), name, name)
	if err := f.db.FailOrder(ctx, o.ID, []byte(problem), "relay: "+url+"/"+longToken("why", 200), t0); err != nil {
		t.Fatal(err)
	}
	// A valid order of the long name with the longest serial there is.
	serial, _ := new(big.Int).SetString(strings.Repeat("7f", 20), 16)
	issued := f.issuedFor(t, name, serial)
	if _, _, err := f.db.EnqueueJob(ctx, store.NewJob{Kind: longToken("relay_issue_", 64), Key: longToken("key", 250), MaxAttempts: 1,
		Payload: []byte(`{"profile":"test","order":"` + o.ID + `","upstream":"` + url + `"}`), RunAt: t0}, t0); err != nil {
		t.Fatal(err)
	}
	claimed, err := f.db.ClaimJobs(ctx, longToken("relay_issue_", 64), "test", t0, t0.Add(time.Minute), 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claiming the job: %v %v", claimed, err)
	}
	if err := f.db.RetireJob(ctx, claimed[0].ID, "test", store.JobFailed, "upstream "+url+" said "+longToken("no", 300), t0); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []string{acme.EventCertificateIssueFailed, acme.EventChallengeFailed} {
		if err := f.db.InsertAudit(ctx, store.AuditEvent{At: t0, Event: ev, Outcome: "failure", Profile: "test", OrderID: o.ID,
			AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Serial: strings.Repeat("7f", 20),
			UserAgent: longToken("agent", 200), Reason: "urn:ietf:params:acme:error:dns", Detail: url + " " + longToken("d", 300)}); err != nil {
			t.Fatal(err)
		}
	}
	// A ready job of a kind nobody here runs, for the overview's line.
	if _, _, err := f.db.EnqueueJob(ctx, store.NewJob{Kind: longToken("removed_profile_", 64), Key: "k", MaxAttempts: 1, RunAt: t0}, t0); err != nil {
		t.Fatal(err)
	}
	// A job of a long kind nobody here runs, cancelled while it waited:
	// its Abandon is owed, for the overview's line and its own page.
	owed := f.cancelWhileWaiting(t, longToken("signer_issue_", 64), longToken("order", 200))
	f.ui.cfg.Operator.RunKinds = func() []string { return []string{"notify_deliver"} }
	job := fmt.Sprintf("/ops/jobs/%d", claimed[0].ID)
	return []string{"/ops/", "/ops/orders", "/ops/orders/" + o.ID, "/ops/orders/" + issued, "/ops/orders/" + issued + "/revoke?done=revoked",
		"/ops/accounts", "/ops/accounts/" + acct.ID, "/ops/accounts/" + acct.ID + "/deactivate",
		"/ops/jobs?kind=" + longToken("relay_issue_", 64), job, job + "/retry", fmt.Sprintf("/ops/jobs/%d", owed), "/ops/jobs?abandon_owed=true", "/ops/audit",
		"/ops/orders?status=" + longToken("no-such-status", 300), "/ops/orders?serial=" + strings.Repeat("f", 300)}
}

// On a phone's screen (375 px wide) no page is wider than the screen,
// whatever long strings it shows: each wraps in its cell, or its table
// scrolls inside its own box, and the page itself never scrolls sideways.
func TestNoPageIsWiderThanAPhonesScreenWithLongValues(t *testing.T) {
	browser := browsertest.Chromium(t)
	f := newFixture(t, true)
	pages := f.seedLongValues(t)
	// The user as a client certificate's subject names it: one token.
	ui, err := New(Config{Operator: f.ui.cfg.Operator, Prefix: "/ops", CSRFKey: []byte("test key"),
		User: func(*http.Request) string {
			return "CN=" + longToken("operator", 120) + ",OU=" + longToken("unit", 80) + ",O=Example"
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ui)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(375, 800))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(375, 800)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	for _, p := range pages {
		t.Run(strings.TrimPrefix(p[:min(len(p), 40)], "/ops/"), func(t *testing.T) {
			var width []int
			if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+p), chromedp.WaitVisible(chromedp.CSS("h1")),
				chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
					width, err = chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`)(ctx, tg)
					return err
				})); err != nil {
				t.Fatalf("loading %s: %v", p, err)
			}
			if width[0] > width[1] {
				t.Errorf("%s is %d px wide on a %d px screen", p, width[0], width[1])
			}
		})
	}
}
