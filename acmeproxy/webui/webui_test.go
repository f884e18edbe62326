package webui

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

type stubSigner struct{}

func (stubSigner) Issue(context.Context, signer.IssueRequest) (signer.IssueOutcome, error) {
	return signer.IssueOutcome{}, nil
}
func (stubSigner) Revoke(context.Context, *x509.Certificate, *int) error { return nil }
func (stubSigner) RevocationRoute() signer.RevocationRoute               { return signer.RevokeInLedger }

type stubValidator struct{}

func (stubValidator) HTTP01(context.Context, string, string, string, string) error { return nil }
func (stubValidator) DNS01(context.Context, string, string) error                  { return nil }
func (stubValidator) TLSALPN01(context.Context, string, string, string) error      { return nil }

type profiles struct{ au *authority.Authority }

func (p profiles) Lookup(name string) (*authority.Authority, bool) {
	return p.au, name == p.au.Profile()
}
func (p profiles) All() []*authority.Authority { return []*authority.Authority{p.au} }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a UI over a store holding one account of profile "test", one
// pending order of it and one ready job.
type fixture struct {
	ui      *UI
	db      *store.DB
	account string
	order   string
	job     int64
}

// testUser is the user the tests' Caddy "authenticated".
const testUser = "alice"

func newFixture(t testing.TB, insecure bool) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clk := clocktest.New(t0)
	q := jobs.NewQueue(db, clk)
	au, err := authority.New(authority.Config{Profile: "test", Prefix: "/acme"}, authority.Options{DB: db, Queue: q, Signer: stubSigner{},
		Validator: stubValidator{}, Clock: clk, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	acct, _, err := db.CreateAccount(ctx, store.Account{ID: "acct1", Profile: "test", Thumbprint: "tp1", KeyJWK: []byte(`{}`),
		Status: acme.StatusValid, Contact: []string{"mailto:ops@example.test"}}, t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	o, err := db.CreateOrder(ctx, store.Order{ID: "order1", Profile: "test", AccountID: acct.ID, Status: acme.StatusPending,
		Identifiers: []acme.Identifier{{Type: "dns", Value: "www.example.test"}}, Expires: t0.Add(time.Hour)}, nil, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := db.EnqueueJob(ctx, store.NewJob{Kind: "notify_deliver", RunAt: t0.Add(time.Hour), MaxAttempts: 3}, t0.Add(-30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ui, err := New(Config{Operator: &operator.Operator{DB: db, Queue: q, Profiles: profiles{au}, Clock: clk}, Prefix: "/ops",
		InsecureNoAuth: insecure, CSRFKey: []byte("test key"),
		User: func(r *http.Request) string { return r.Header.Get("X-Test-User") }})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ui: ui, db: db, account: acct.ID, order: o.ID, job: j.ID}
}

// path puts the fixture's order id (the store chooses it) for "order1".
func (f *fixture) path(p string) string { return strings.ReplaceAll(p, "order1", f.order) }

// get sends a GET as testUser.
func (f *fixture) get(t *testing.T, path string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "https://ops.example.test"+f.path(path), nil)
	r.Header.Set("X-Test-User", testUser)
	w := httptest.NewRecorder()
	f.ui.ServeHTTP(w, r)
	return w
}

// post sends a same-origin form POST as testUser, with the CSRF token of
// the user's pages unless form sets one.
func (f *fixture) post(t *testing.T, path string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", f.ui.csrfToken(testUser))
	}
	r := httptest.NewRequest(http.MethodPost, "https://ops.example.test"+f.path(path), strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("X-Test-User", testUser)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	w := httptest.NewRecorder()
	f.ui.ServeHTTP(w, r)
	return w
}

// An order's problem is shown as an operator reads it — its ACME type and
// detail, each subproblem's too — not as JSON with its escapes, and
// escaped as HTML.
func TestAnOrdersProblemIsShownAsTypeAndDetail(t *testing.T) {
	f := newFixture(t, false)
	doc := `{"type":"urn:ietf:params:acme:error:compound","detail":"two names <failed>","status":400,` +
		`"subproblems":[{"type":"urn:ietf:params:acme:error:incorrectResponse","detail":"wrong answer","identifier":{"type":"dns","value":"a.example.test"}}]}`
	if err := f.db.FailOrder(t.Context(), f.order, []byte(doc), "operator detail", time.Now()); err != nil {
		t.Fatal(err)
	}
	body := f.get(t, f.path("/ops/orders/order1")).Body.String()
	want := `<dd id="problem">compound: two names &lt;failed&gt;; a.example.test incorrectResponse: wrong answer</dd>`
	if !strings.Contains(body, want) {
		t.Errorf("the order page lacks %s:\n%s", want, body)
	}
	if strings.Contains(body, `\u003c`) || strings.Contains(body, "urn:ietf:params") {
		t.Errorf("the order page shows the problem's JSON:\n%s", body)
	}
}

// A path of 10 KB is answered without being echoed whole.
func TestALongPathIsNotEchoedBack(t *testing.T) {
	f := newFixture(t, false)
	for _, path := range []string{"/ops/orders/" + strings.Repeat("x", 10<<10), "/ops/" + strings.Repeat("y", 10<<10)} {
		w := f.get(t, path)
		if w.Code != http.StatusNotFound || w.Body.Len() > 4<<10 {
			t.Errorf("GET %.20s…: %d with %d bytes; want 404 in under 4 KiB", path, w.Code, w.Body.Len())
		}
	}
}

// A job's page offers only what its state allows: a cancelled job may be
// retried and not cancelled again, and says no "cancel requested".
func TestAJobsPageOffersOnlyTheActionsItsStateAllows(t *testing.T) {
	f := newFixture(t, false)
	if _, err := f.db.CancelJob(t.Context(), f.job, time.Now()); err != nil {
		t.Fatal(err)
	}
	body := f.get(t, fmt.Sprintf("/ops/jobs/%d", f.job)).Body.String()
	if !strings.Contains(body, "Retry now…") {
		t.Errorf("a cancelled job offers no retry:\n%s", body)
	}
	for _, not := range []string{"Cancel…", "cancel requested"} {
		if strings.Contains(body, not) {
			t.Errorf("a cancelled job's page says %q:\n%s", not, body)
		}
	}
}

// Recurring housekeeping may be run now, never cancelled: its page offers
// no Cancel, and asking anyway is refused.
func TestARecurringJobsPageOffersToRunItNowAndNotToCancelIt(t *testing.T) {
	f := newFixture(t, false)
	j, _, err := jobs.NewQueue(f.db, nil).Enqueue(t.Context(), jobs.Spec{Kind: "crl_refresh", Key: "crl_refresh"})
	if err != nil {
		t.Fatal(err)
	}
	body := f.get(t, fmt.Sprintf("/ops/jobs/%d", j.ID)).Body.String()
	if !strings.Contains(body, "Retry now…") || strings.Contains(body, "Cancel…") {
		t.Errorf("a recurring job's page should offer Retry and not Cancel:\n%s", body)
	}
}

func TestEveryPageAnswersWithItsContentAndTheSecurityHeaders(t *testing.T) {
	f := newFixture(t, false)
	tests := []struct {
		name, path string
		status     int
		want       []string
	}{
		{"overview", "/ops/", 200, []string{"Overview", "notify_deliver", "<svg", "<code>/acme</code>", "<td>webui</td>"}},
		{"overview without the slash", "/ops", 200, []string{"Overview"}},
		{"orders", "/ops/orders", 200, []string{"order1", "www.example.test"}},
		{"orders by profile and status", "/ops/orders?profile=test&status=pending", 200, []string{"order1"}},
		{"orders by another status", "/ops/orders?status=valid", 200, []string{"No order matches."}},
		{"orders by identifier", "/ops/orders?identifier=WWW.example.test.", 200, []string{"order1"}},
		{"orders by account", "/ops/orders?account=nobody", 200, []string{"No order matches."}},
		{"orders by a bad status", "/ops/orders?status=bogus", 400, []string{"status &#34;bogus&#34; is not one of"}},
		{"orders by an unknown serial", "/ops/orders?serial=0a:0b", 200, []string{"No order matches.", `value="0a:0b"`}},
		{"orders by a non-hex serial", "/ops/orders?serial=xyz", 400, []string{"not hexadecimal"}},
		{"an order", "/ops/orders/order1", 200, []string{"www.example.test", "No certificate has been issued"}},
		{"an unknown order", "/ops/orders/nope", 404, []string{"404"}},
		{"the chain of an order without one", "/ops/orders/order1/chain.pem", 404, []string{"has no certificate"}},
		{"the revoke confirmation of an order without a certificate", "/ops/orders/order1/revoke", 409, []string{"has no certificate"}},
		{"accounts", "/ops/accounts", 200, []string{"acct1", "mailto:ops@example.test"}},
		{"accounts by status", "/ops/accounts?status=deactivated", 200, []string{"No account matches."}},
		{"an account", "/ops/accounts/acct1", 200, []string{"tp1", "order1", "Deactivate…"}},
		{"the deactivate confirmation", "/ops/accounts/acct1/deactivate", 200, []string{"Deactivate the account", `name="csrf"`}},
		{"jobs", "/ops/jobs", 200, []string{"notify_deliver"}},
		{"jobs by kind", "/ops/jobs?kind=crl", 200, []string{"No job matches."}},
		{"a job", "/ops/jobs/1", 200, []string{"notify_deliver", "Retry now…", "Cancel…"}},
		{"a job by a bad id", "/ops/jobs/x", 400, []string{"not a positive number"}},
		{"the retry confirmation", "/ops/jobs/1/retry", 200, []string{"Retry the job now"}},
		{"the cancel confirmation", "/ops/jobs/1/cancel", 200, []string{"Cancel the job"}},
		{"audit", "/ops/audit", 200, []string{"Audit"}},
		{"audit by outcome and time", "/ops/audit?outcome=failure&since=2026-01-01T00:00", 200, []string{"No audit row matches."}},
		{"audit by a bad time", "/ops/audit?since=yesterday", 400, []string{"is not a time"}},
		{"audit before a bad row", "/ops/audit?before=abc", 400, []string{"before &#34;abc&#34; is not a positive number"}},
		{"the stylesheet", "/ops/static/ui.css", 200, []string{"prefers-color-scheme"}},
		{"an unknown page", "/ops/secrets", 404, []string{"no page"}},
		{"an order id of 10 KB, not echoed", "/ops/orders/" + strings.Repeat("x", 10<<10), 404, []string{"no id is 10240 bytes long"}},
		{"an unknown page of 10 KB, clipped", "/ops/" + strings.Repeat("y", 10<<10), 404, []string{"no page /ops/yyy"}},
		{"a page too deep", "/ops/orders/order1/revoke/now", 404, []string{"no page"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := f.get(t, tt.path)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			for _, s := range tt.want {
				if !strings.Contains(w.Body.String(), f.path(s)) {
					t.Errorf("the page lacks %q:\n%s", s, w.Body)
				}
			}
			for h, want := range map[string]string{"Content-Security-Policy": csp, "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin"} {
				if got := w.Header().Get(h); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
		})
	}
}

func TestAPathOutsideThePrefixIsNotTheUIs(t *testing.T) {
	f := newFixture(t, false)
	for path, want := range map[string]bool{"/ops": true, "/ops/": true, "/ops/orders": true, "/opsx": false, "/": false, "/acme/directory": false} {
		if got := f.ui.Handles(path); got != want {
			t.Errorf("Handles(%q) = %v, want %v", path, got, want)
		}
	}
}

// insecure_no_auth answers a request addressed to an IP address or
// localhost only: under a DNS name, an attacker's page whose name was
// made to resolve here (DNS rebinding) would be this page's origin.
func TestInsecureNoAuthAnswersOnlyRequestsAddressedToAnAddressOrLocalhost(t *testing.T) {
	f := newFixture(t, true)
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1", http.StatusOK},
		{"127.0.0.1:8080", http.StatusOK},
		{"[::1]:8080", http.StatusOK},
		{"10.1.2.3:8080", http.StatusOK},
		{"localhost:8080", http.StatusOK},
		{"LOCALHOST.", http.StatusOK},
		{"ops.localhost", http.StatusOK},
		{"evil.example:8080", http.StatusForbidden},
		{"ops.lan", http.StatusForbidden},
		{"localhost.evil.example", http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://"+tc.host+"/ops/orders", nil)
			w := httptest.NewRecorder()
			f.ui.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("Host %s: %d, want %d: %s", tc.host, w.Code, tc.want, w.Body)
			}
			if tc.want == http.StatusForbidden && !strings.Contains(w.Body.String(), "IP address or localhost") {
				t.Errorf("the refusal does not say why: %s", w.Body)
			}
		})
	}
}

func TestARequestNobodyAuthenticatedIsRefused(t *testing.T) {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "bob"}}
	tests := []struct {
		name     string
		insecure bool
		user     string
		tls      *tls.ConnectionState
		status   int
		who      string
	}{
		{"no user, no certificate", false, "", nil, http.StatusForbidden, ""},
		{"TLS without a verified client certificate", false, "", &tls.ConnectionState{}, http.StatusForbidden, ""},
		{"a user Caddy authenticated", false, "alice", nil, http.StatusOK, "alice"},
		{"a verified client certificate", false, "", &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}, http.StatusOK, "bob"},
		{"insecure_no_auth addressed to a loopback address", true, "", nil, http.StatusOK, "anonymous"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.insecure)
			host := "ops.example.test"
			if tt.insecure {
				host = "127.0.0.1:8080"
			}
			r := httptest.NewRequest(http.MethodGet, "https://"+host+"/ops/orders", nil)
			r.Header.Set("X-Test-User", tt.user)
			r.TLS = tt.tls
			w := httptest.NewRecorder()
			f.ui.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if tt.status == http.StatusForbidden {
				if !strings.Contains(w.Body.String(), "basic_auth") || strings.Contains(w.Body.String(), "order1") {
					t.Errorf("the refusal does not explain itself, or shows data: %s", w.Body)
				}
				return
			}
			if !strings.Contains(w.Body.String(), `<b id="user">`+tt.who+`</b>`) {
				t.Errorf("the page does not name %q as the user", tt.who)
			}
		})
	}
}

func TestAPostWithoutTheUsersTokenOrFromAnotherOriginChangesNothing(t *testing.T) {
	tests := []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"no token", url.Values{"csrf": nil}, nil},
		{"a wrong token", url.Values{"csrf": {"forged"}}, nil},
		{"another user's token", url.Values{"csrf": {(&UI{cfg: Config{CSRFKey: []byte("test key")}}).csrfToken("mallory")}}, nil},
		{"cross-site", nil, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"same-site but another origin", nil, map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"no Sec-Fetch-Site and another Origin", nil, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}},
		{"no Sec-Fetch-Site and Origin null", nil, map[string]string{"Sec-Fetch-Site": "", "Origin": "null"}},
		{"no Sec-Fetch-Site and no Origin", nil, map[string]string{"Sec-Fetch-Site": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			w := f.post(t, "/ops/accounts/acct1/do-deactivate", tt.form, tt.hdr)
			if w.Code != http.StatusForbidden {
				t.Fatalf("status %d, want 403: %s", w.Code, w.Body)
			}
			a, err := f.db.AccountByID(context.Background(), f.account)
			if err != nil {
				t.Fatal(err)
			}
			if a.Status != acme.StatusValid {
				t.Errorf("the refused POST deactivated the account (%s)", a.Status)
			}
		})
	}
}

func TestAPostWithTheTokenFromTheOwnOriginIsAccepted(t *testing.T) {
	f := newFixture(t, false)
	w := f.post(t, "/ops/accounts/acct1/do-deactivate", nil, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://ops.example.test"})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("status %d, want 303: %s", w.Code, w.Body)
	}
}

func TestAGetCannotChangeAnything(t *testing.T) {
	f := newFixture(t, false)
	for _, path := range []string{"/ops/accounts/acct1/do-deactivate", "/ops/orders/order1/do-revoke", "/ops/jobs/1/do-retry", "/ops/jobs/1/do-cancel"} {
		if w := f.get(t, path); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
			t.Errorf("GET %s: status %d, Allow %q; want 405, POST", path, w.Code, w.Header().Get("Allow"))
		}
	}
	if w := f.post(t, "/ops/orders", nil, nil); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST to a page: status %d, want 405", w.Code)
	}
}

// auditActor is the actor of the newest audit row of event.
func auditActor(t *testing.T, db *store.DB, event string) (string, string) {
	t.Helper()
	evs, err := db.SearchAudit(context.Background(), store.AuditFilter{Event: event})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Fatalf("no %s audit row", event)
	}
	return evs[0].ActorKind, evs[0].ActorID
}

func TestEachChangeIsDoneAndAuditedWithTheAuthenticatedUser(t *testing.T) {
	tests := []struct {
		name, path, event, done string
		check                   func(t *testing.T, f *fixture)
	}{
		{"deactivate an account", "/ops/accounts/acct1/do-deactivate", acme.EventAccountDeactivated, "/ops/accounts/acct1?done=deactivated",
			func(t *testing.T, f *fixture) {
				if a, _ := f.db.AccountByID(context.Background(), f.account); a.Status != acme.StatusDeactivated {
					t.Errorf("account %s", a.Status)
				}
			}},
		{"cancel a job", "/ops/jobs/1/do-cancel", acme.EventJobCancelled, "/ops/jobs/1?done=cancelled",
			func(t *testing.T, f *fixture) {
				if j, _ := f.ui.cfg.Operator.ShowJob(context.Background(), f.job); j.Status != "cancelled" {
					t.Errorf("job %s", j.Status)
				}
			}},
		{"retry a job", "/ops/jobs/1/do-retry", acme.EventJobRetried, "/ops/jobs/1?done=retried",
			func(t *testing.T, f *fixture) {
				if j, _ := f.ui.cfg.Operator.ShowJob(context.Background(), f.job); !j.RunAt.Equal(t0) {
					t.Errorf("job runs at %s, want now (%s)", j.RunAt, t0)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			w := f.post(t, tt.path, nil, nil)
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != tt.done {
				t.Fatalf("status %d to %q, want 303 to %q: %s", w.Code, w.Header().Get("Location"), tt.done, w.Body)
			}
			tt.check(t, f)
			if kind, id := auditActor(t, f.db, tt.event); kind != authority.ActorWebUI || id != testUser {
				t.Errorf("audited as %s %q, want %s %q", kind, id, authority.ActorWebUI, testUser)
			}
			u, _ := url.Parse(tt.done)
			if page := f.get(t, u.RequestURI()); !strings.Contains(page.Body.String(), doneText[u.Query().Get("done")]) {
				t.Errorf("the page after the change does not say it was done")
			}
		})
	}
}

func TestRevokingAnOrderWithoutACertificateIsAConflict(t *testing.T) {
	f := newFixture(t, false)
	w := f.post(t, "/ops/orders/order1/do-revoke", url.Values{"reason": {"1"}}, nil)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "has no certificate") {
		t.Errorf("status %d, want 409 saying why: %s", w.Code, w.Body)
	}
}

func TestTheOverviewCountsTheLastDaysOrdersAndIssuances(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	for _, at := range []time.Duration{-90 * time.Minute, -30 * time.Minute, -25 * time.Hour} {
		if err := f.db.InsertAudit(ctx, store.AuditEvent{At: t0.Add(at), Event: acme.EventCertificateIssued, Outcome: "success", Profile: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.db.InsertAudit(ctx, store.AuditEvent{At: t0.Add(-10 * time.Minute), Event: acme.EventCertificateIssueFailed, Outcome: "failure",
		Profile: "test", Reason: "signer refused: key too small"}); err != nil {
		t.Fatal(err)
	}
	// An order of yesterday's hour before the window is not counted.
	if _, err := f.db.CreateOrder(ctx, store.Order{Profile: "test", AccountID: f.account, Status: acme.StatusPending,
		Identifiers: []acme.Identifier{{Type: "dns", Value: "old.example.test"}}, Expires: t0}, nil, t0.Add(-25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	body := f.get(t, "/ops/").Body.String()
	for _, want := range []string{`id="issued" href="/ops/audit?event=certificate_issued&amp;since=2026-02-28T13%3A00%3A00Z">2</a>`,
		`id="failed" href="/ops/audit?event=certificate_issue_failed&amp;since=2026-02-28T13%3A00%3A00Z">1</a>`,
		"33.3% of attempts", "signer refused: key too small",
		// order1, pending, in the pending column; the job, due in an hour, not waiting yet.
		`<td class="n"><a href="/ops/orders?profile=test&amp;status=pending&amp;since=2026-02-28T12%3a00%3a00Z">1</a></td>`, `<td class="n">1</td><td>—</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
	// 24 hourly bars; the chart's tallest is the peak.
	if n := len(regexp.MustCompile(`<rect class="i"`).FindAllString(body, -1)); n != 24 {
		t.Errorf("%d hourly bars, want 24", n)
	}
}

func TestNoPageShowsAJobsPayload(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	j, _, err := f.db.EnqueueJob(ctx, store.NewJob{Kind: "notify_deliver", Payload: []byte(`{"secret":"hunter2-webhook-secret"}`), RunAt: t0, MaxAttempts: 1}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ops/", "/ops/jobs", "/ops/jobs/" + strconv.FormatInt(j.ID, 10)} {
		if body := f.get(t, path).Body.String(); strings.Contains(body, "hunter2") {
			t.Errorf("%s shows the job's payload", path)
		}
	}
}

func TestAListPaginatesKeepingItsFilters(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	for i := range pageLimit {
		if _, err := f.db.CreateOrder(ctx, store.Order{Profile: "test", AccountID: f.account, Status: acme.StatusPending,
			Identifiers: []acme.Identifier{{Type: "dns", Value: "page.example.test"}}, Expires: t0.Add(time.Hour)}, nil, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	first := f.get(t, "/ops/orders?status=pending").Body.String()
	next := regexp.MustCompile(`rel="next" href="\?([^"]+)"`).FindStringSubmatch(first)
	if next == nil {
		t.Fatal("a full first page has no next-page link")
	}
	q, err := url.ParseQuery(strings.ReplaceAll(next[1], "&amp;", "&"))
	if err != nil || q.Get("status") != "pending" || q.Get("after") == "" {
		t.Fatalf("the next-page link %q drops the filter or the cursor", next[1])
	}
	second := f.get(t, "/ops/orders?"+q.Encode()).Body.String()
	if !strings.Contains(second, f.order) || strings.Contains(second, `rel="next"`) {
		t.Errorf("the second page does not hold the oldest order alone, or links further")
	}
	if strings.Contains(first, f.order) {
		t.Errorf("the first page holds the oldest order, which is the 51st")
	}
}

func TestTheUsersNameIsEscapedOnThePage(t *testing.T) {
	f := newFixture(t, false)
	r := httptest.NewRequest(http.MethodGet, "https://ops.example.test/ops/", nil)
	r.Header.Set("X-Test-User", `<script>alert(1)</script>`)
	w := httptest.NewRecorder()
	f.ui.ServeHTTP(w, r)
	if strings.Contains(w.Body.String(), "<script>") || !strings.Contains(w.Body.String(), "&lt;script&gt;") {
		t.Errorf("the user's name is not escaped")
	}
}

// Behind a handler that stripped a path before the page saw the request
// (Config.Mount), the page's links, its forms and its redirect after a
// change carry that path again, before the prefix.
func TestLinksFormsAndRedirectsKeepThePathStrippedInFront(t *testing.T) {
	f := newFixture(t, false)
	f.ui.cfg.Mount = func(*http.Request) string { return "/front" }
	page := f.get(t, "/ops/accounts/acct1/deactivate").Body.String()
	for _, want := range []string{`href="/front/ops/static/ui.css"`, `href="/front/ops/jobs"`, `action="/front/ops/accounts/acct1/do-deactivate"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the confirmation page lacks %s:\n%s", want, page)
		}
	}
	w := f.post(t, "/ops/accounts/acct1/do-deactivate", nil, nil)
	if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != "/front/ops/accounts/acct1?done=deactivated" {
		t.Errorf("the change answered %d, Location %q; want 303 to /front/ops/accounts/acct1?done=deactivated", w.Code, loc)
	}
}

// fuzzMarkup is markup a fuzzed path or query may carry; no page holds it,
// so a page that does copied it from the request unescaped.
const fuzzMarkup = "<x-fuzz"

// FuzzUIPath sends GET and POST requests to any path below the prefix and
// checks that the page never panics, never answers 5xx (a path is the
// caller's), always sends its security headers, never copies markup from
// the path or the query into the page unescaped, and that a POST without
// the token never answers 2xx or 3xx.
func FuzzUIPath(f *testing.F) {
	for _, s := range []string{"", "orders", "orders/x", "orders/x/revoke", "orders/x/do-revoke", "jobs/1/do-retry", "jobs/-1", "jobs/99999999999999999999",
		"accounts//deactivate", "audit?since=x", "orders?serial=::", "static/ui.css", "static/../webui.go", "a/b/c/d", "%2e%2e/",
		fuzzMarkup + ">", "orders/" + fuzzMarkup + ">", "orders/%3Cx-fuzz%3E/revoke", "audit?event=%3Cx-fuzz%3E&since=" + fuzzMarkup,
		"orders?done=" + fuzzMarkup + ">", "accounts?status=" + fuzzMarkup, "jobs?kind=%3Cx-fuzz"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	fx := newFixture(f, false)
	f.Fuzz(func(t *testing.T, rel string, post bool) {
		u, err := url.Parse("https://ops.example.test/ops/" + rel)
		if err != nil {
			return
		}
		method := http.MethodGet
		if post {
			method = http.MethodPost
		}
		r := httptest.NewRequest(method, "https://ops.example.test/", nil)
		r.URL = u
		r.Header.Set("X-Test-User", testUser)
		w := httptest.NewRecorder()
		fx.ui.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Errorf("%s %s: %d: %s", method, rel, w.Code, w.Body)
		}
		if w.Header().Get("Content-Security-Policy") != csp || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: no security headers", method, rel)
		}
		if post && w.Code < 400 {
			t.Errorf("POST %s without a token: %d", rel, w.Code)
		}
		query, _ := url.QueryUnescape(u.RawQuery)
		if strings.Contains(u.Path+"?"+query, fuzzMarkup) && strings.Contains(w.Body.String(), fuzzMarkup) {
			t.Errorf("%s %s: the page holds the request's markup unescaped: %s", method, rel, w.Body)
		}
	})
}

// A refusal that quotes what the request sent — a filter, a form's
// field, a header — quotes at most its start: a value of 10 KiB is not
// echoed whole into the page (nor into the log line of a refused POST).
func TestARefusalQuotesOnlyTheStartOfALongValue(t *testing.T) {
	long := strings.Repeat("z", 10<<10)
	tests := []struct {
		name   string
		status int
		send   func(f *fixture, t *testing.T) *httptest.ResponseRecorder
	}{
		{"orders since", 400, func(f *fixture, t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/orders?since="+long) }},
		{"audit until", 400, func(f *fixture, t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/audit?until="+long) }},
		{"audit before", 400, func(f *fixture, t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/audit?before="+long) }},
		{"jobs before", 400, func(f *fixture, t *testing.T) *httptest.ResponseRecorder { return f.get(t, "/ops/jobs?before="+long) }},
		{"a revocation's reason", 400, func(f *fixture, t *testing.T) *httptest.ResponseRecorder {
			return f.post(t, "/ops/orders/order1/do-revoke", url.Values{"reason": {long}}, nil)
		}},
		{"Sec-Fetch-Site", 403, func(f *fixture, t *testing.T) *httptest.ResponseRecorder {
			return f.post(t, "/ops/accounts/acct1/do-deactivate", nil, map[string]string{"Sec-Fetch-Site": long})
		}},
		{"Origin", 403, func(f *fixture, t *testing.T) *httptest.ResponseRecorder {
			return f.post(t, "/ops/accounts/acct1/do-deactivate", nil, map[string]string{"Sec-Fetch-Site": "", "Origin": long})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, false)
			w := tt.send(f, t)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %.300s", w.Code, tt.status, w.Body)
			}
			if !strings.Contains(w.Body.String(), "zzzz") {
				t.Errorf("the refusal does not quote the value's start: %s", w.Body)
			}
			if strings.Contains(w.Body.String(), strings.Repeat("z", 1<<10)) {
				t.Errorf("the refusal echoes the value whole (%d bytes)", w.Body.Len())
			}
		})
	}
}

// A page the database cannot answer (out of reach, or slower than the
// request's deadline) is a 503 that says when to ask again, as the admin
// API's is.
func TestAPageTheDatabaseCannotAnswerIsA503WithRetryAfter(t *testing.T) {
	f := newFixture(t, false)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	r := httptest.NewRequest(http.MethodGet, "https://ops.example.test/ops/orders", nil).WithContext(ctx)
	r.Header.Set("X-Test-User", testUser)
	w := httptest.NewRecorder()
	f.ui.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", w.Code, w.Body)
	}
	if got, want := w.Header().Get("Retry-After"), strconv.Itoa(int(operator.UnavailableRetryAfter/time.Second)); got != want {
		t.Errorf("Retry-After %q; want %s", got, want)
	}
}
