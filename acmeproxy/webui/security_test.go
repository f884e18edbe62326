package webui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// markup is what a client puts in the strings it controls, hoping the page
// renders it: a script element, an event handler, a quote that would end
// an attribute. The page holds no "<script" or "<img" of its own.
const markup = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`

// Everything a client chooses and the page shows — an order's identifiers,
// an account's contact, a challenge's and an order's problem, an audit
// row's identifiers, actor, reason and detail, a job's key and last error
// (an upstream's or a script's words) — is shown as text: no page renders
// it as markup.
func TestWhatAClientChoseIsShownAsTextOnEveryPageThatShowsIt(t *testing.T) {
	f := newFixture(t, false)
	ctx := t.Context()
	acct, _, err := f.db.CreateAccount(ctx, store.Account{Profile: "test", Thumbprint: "tp-x", KeyJWK: []byte(`{}`),
		Status: acme.StatusValid, Contact: []string{"mailto:" + markup}}, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ident := acme.Identifier{Type: "dns", Value: markup + ".example.test"}
	problem := fmt.Sprintf(`{"type":"urn:ietf:params:acme:error:connection","detail":%q,"status":400}`, "redirect to "+markup)
	o, err := f.db.CreateOrder(ctx, store.Order{Profile: "test", AccountID: acct.ID, Status: acme.StatusPending,
		Identifiers: []acme.Identifier{ident}, Expires: t0.Add(time.Hour)},
		[]store.Authz{{AccountID: acct.ID, Identifier: ident, Status: acme.StatusPending, Expires: t0.Add(time.Hour),
			Challenges: []store.Challenge{{Type: acme.ChallengeHTTP01, Token: "tok", Status: acme.StatusPending}}}}, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := f.db.GetOrder(ctx, "test", o.ID)
	if err != nil || len(stored.AuthzIDs) != 1 {
		t.Fatalf("the order's authorizations: %v %v", stored.AuthzIDs, err)
	}
	authz, err := f.db.GetAuthz(ctx, "test", stored.AuthzIDs[0])
	if err != nil || len(authz.Challenges) != 1 {
		t.Fatalf("the authorization's challenges: %v %v", authz.Challenges, err)
	}
	if err := f.db.NoteChallengeRetry(ctx, authz.Challenges[0].ID, []byte(problem), t0); err != nil {
		t.Fatal(err)
	}
	if err := f.db.FailOrder(ctx, o.ID, []byte(problem), "operator detail "+markup, t0); err != nil {
		t.Fatal(err)
	}
	if err := f.db.InsertAudits(ctx, []store.AuditEvent{
		{At: t0.Add(-time.Minute), Event: acme.EventChallengeFailed, Outcome: "failure", Profile: "test", ActorKind: "acme_account",
			ActorID: markup, OrderID: o.ID, AccountID: acct.ID, Identifiers: []acme.Identifier{ident}, UserAgent: markup,
			Reason: markup, Detail: "http-01: " + markup},
		{At: t0.Add(-time.Minute), Event: acme.EventAccountBindingRefused, Outcome: "refused", Profile: "test", ActorKind: "account_key",
			ActorID: "tp", Reason: markup, Detail: markup},
	}); err != nil {
		t.Fatal(err)
	}
	j, _, err := f.db.EnqueueJob(ctx, store.NewJob{Kind: "relay_issue", Key: markup, RunAt: t0.Add(-time.Minute), MaxAttempts: 3}, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := f.db.ClaimJobs(ctx, "relay_issue", "runner", t0, t0.Add(time.Minute), 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claiming the job: %v %v", claimed, err)
	}
	if _, err := f.db.RetryJob(ctx, j.ID, "runner", t0.Add(time.Hour), "upstream said "+markup, false, t0); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{"/ops/", "/ops/orders", "/ops/orders/" + o.ID, "/ops/accounts", "/ops/accounts/" + acct.ID,
		"/ops/jobs", fmt.Sprintf("/ops/jobs/%d", j.ID), "/ops/audit", "/ops/orders?identifier=" + url.QueryEscape(ident.Value)} {
		t.Run(path, func(t *testing.T) {
			w := f.get(t, path)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			body := w.Body.String()
			for _, tag := range []string{"<script", "<img", `"'>`} {
				if strings.Contains(body, tag) {
					t.Errorf("the page renders %s from what a client chose:\n%s", tag, body)
				}
			}
			if !strings.Contains(body, "&lt;script&gt;") {
				t.Errorf("the page does not show what the client chose, escaped:\n%s", body)
			}
		})
	}
}

// Every answer of the page — a page, an error page, the refusal of a
// request nobody authenticated, a 405, the redirect after a change, the
// stylesheet, a chain's download — carries the security headers: a CSP
// without inline script or style, no framing, no Referer to other origins,
// no sniffing.
func TestEveryAnswerCarriesTheSecurityHeadersRefusalsAndRedirectsToo(t *testing.T) {
	f := newFixture(t, false)
	tests := []struct {
		name   string
		send   func(t *testing.T) *httptest.ResponseRecorder
		status int
	}{
		{"a page", func(t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/orders") }, http.StatusOK},
		{"an error page", func(t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/orders/nope") }, http.StatusNotFound},
		{"the stylesheet", func(t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/static/ui.css") }, http.StatusOK},
		{"a GET of a change", func(t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/jobs/1/do-cancel") }, http.StatusMethodNotAllowed},
		{"a request nobody authenticated", func(t *testing.T) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			f.ui.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "https://ops.example.test/ops/", nil))
			return w
		}, http.StatusForbidden},
		{"a cross-site POST", func(t *testing.T) *httptest.ResponseRecorder {
			return f.post(t, "/ops/jobs/1/do-cancel", nil, map[string]string{"Sec-Fetch-Site": "cross-site"})
		}, http.StatusForbidden},
		{"the redirect after a change", func(t *testing.T) *httptest.ResponseRecorder {
			return f.post(t, "/ops/jobs/1/do-retry", nil, nil)
		}, http.StatusSeeOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.send(t)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			for h, want := range map[string]string{"Content-Security-Policy": csp, "X-Frame-Options": "DENY",
				"Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff"} {
				if got := w.Header().Get(h); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
			got := w.Header().Get("Content-Security-Policy")
			for _, part := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'self'"} {
				if !strings.Contains(got, part) {
					t.Errorf("the CSP %q lacks %s", got, part)
				}
			}
			if strings.Contains(got, "unsafe-") || strings.Contains(got, "script-src") {
				t.Errorf("the CSP %q allows inline code or scripts", got)
			}
		})
	}
}

// Every change the page makes is a POST route, and each one refuses a form
// sent from another origin — whether the browser says so in
// Sec-Fetch-Site or, without it, in Origin — before it does anything,
// even with the user's own token; the same form from the page's own origin
// passes that check.
func TestEveryChangeRefusesAFormFromAnotherOriginAndTakesOneFromItsOwn(t *testing.T) {
	var posts []string
	for k, rt := range routes {
		if rt.method == http.MethodPost {
			posts = append(posts, k.kind+"/ID/"+k.action)
		}
	}
	if len(posts) < 4 {
		t.Fatalf("the page has %d POST routes (%v); the test expects revoke, deactivate, retry and cancel at least", len(posts), posts)
	}
	ids := map[string]string{"orders": "order1", "accounts": "acct1", "jobs": "1"}
	for _, p := range posts {
		kind, _, _ := strings.Cut(p, "/")
		path := "/ops/" + strings.Replace(p, "ID", ids[kind], 1)
		for _, tc := range []struct {
			name string
			hdr  map[string]string
			ok   bool
		}{
			{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, false},
			{"another origin of the same site", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "https://x.example.test"}, false},
			{"another Origin without Sec-Fetch-Site", map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, false},
			{"another scheme without Sec-Fetch-Site", map[string]string{"Sec-Fetch-Site": "", "Origin": "http://ops.example.test"}, false},
			{"same-origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "https://ops.example.test"}, true},
			{"its own Origin without Sec-Fetch-Site", map[string]string{"Sec-Fetch-Site": "", "Origin": "https://ops.example.test"}, true},
		} {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				f := newFixture(t, false)
				var before int
				if evs, err := f.db.SearchAudit(t.Context(), store.AuditFilter{}); err == nil {
					before = len(evs)
				}
				w := f.post(t, path, url.Values{"reason": {"4"}}, tc.hdr)
				refused := w.Code == http.StatusForbidden && strings.Contains(w.Body.String(), "origin")
				if refused == tc.ok {
					t.Fatalf("status %d; want it refused for its origin: %v\n%s", w.Code, !tc.ok, w.Body)
				}
				if !tc.ok {
					evs, err := f.db.SearchAudit(t.Context(), store.AuditFilter{})
					if err != nil || len(evs) != before {
						t.Errorf("the refused POST wrote audit rows (%d, was %d; %v)", len(evs), before, err)
					}
				}
			})
		}
	}
}

// A refused POST is logged with the start of its path only: a route's
// path may be padded with any number of slashes (they are trimmed to
// find it), and a page of another origin can have the operator's browser
// post to one as long as a request line may be.
func TestARefusedPostIsLoggedWithTheStartOfItsPathOnly(t *testing.T) {
	f := newFixture(t, false)
	core, logs := observer.New(zap.WarnLevel)
	f.ui.cfg.Logger = zap.New(core)
	path := fmt.Sprintf("/ops/jobs/%d/do-cancel", f.job) + strings.Repeat("/", 30<<10)
	if w := f.post(t, path, url.Values{"csrf": {"not the token"}}, nil); w.Code != http.StatusForbidden {
		t.Fatalf("POST with a wrong token: %d; want 403", w.Code)
	}
	refused := logs.FilterField(zap.String("event", "ui_post_refused")).All()
	if len(refused) != 1 {
		t.Fatalf("%d ui_post_refused lines; want 1", len(refused))
	}
	if got := refused[0].ContextMap()["path"].(string); len(got) > 1024 {
		t.Errorf("the line's path is %d bytes; want at most 1024: %.80q…", len(got), got)
	}
}
