package caddyacmeproxy

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/acmeproxy/caddy-acme-proxy/internal/browsertest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// uiChrome starts a headless chromium for the test, its window 1200×900,
// with more command-line flags, and returns the context that drives it.
func uiChrome(ctx context.Context, t *testing.T, browser string, flags ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("ignore-certificate-errors", true), // Caddy's local CA, which this browser does not trust
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 900)}, flags...)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	return bctx
}

// uiScreenshots is where the browser test saves its screenshots: the
// directory ACMEPROXY_UI_SCREENSHOTS names, else the test's temporary one.
func uiScreenshots(t *testing.T) string {
	if d := os.Getenv("ACMEPROXY_UI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// uiSite is the operator page on the proxy's site under /ops, behind
// basic_auth, and the same page under /open with no authentication.
const uiSite = `
	route /ops* {
		basic_auth {
			%s %s
		}
		acme_proxy_ui {
			prefix /ops
		}
	}
	route /open* {
		acme_proxy_ui {
			prefix /open
		}
	}
`

func TestAnOperatorRevokesACertificateFromTheWebPageInARealBrowser(t *testing.T) {
	browser := browsertest.Chromium(t)
	shots := uiScreenshots(t)
	const user, password = "alice", "correct horse battery staple"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	env := newE2EEnv(t)
	ln := e2eListen(t)
	b := &revokeBench{env: env, srv: serveE2EHTTP01(t, ln)}
	env.load(t, e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t), ExtraProfiles: fmt.Sprintf(uiSite, user, hash)})
	ctx, cancel := context.WithTimeout(t.Context(), 4*e2eWait)
	defer cancel()
	base := fmt.Sprintf("https://127.0.0.1:%d", env.HTTPSPort)

	// Caddy's own authentication stands in front: no credentials, 401;
	// the page with none in front refuses, 403.
	for path, want := range map[string]int{"/ops/": http.StatusUnauthorized, "/open/": http.StatusForbidden} {
		resp, err := env.client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without credentials: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// A real client issues a certificate.
	c := newE2EXCrypto(ctx, t, env)
	got := b.obtain(ctx, t, c, "ui.example.com")
	serial := fmt.Sprintf("%x", got.leaf.SerialNumber)

	// The browser, logged in through basic_auth.
	bctx := uiChrome(ctx, t, browser)
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), png, 0o644)
		})
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("the text of %s: %v", sel, err)
		}
		return s
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("the browser, %s: %v", what, err)
		}
	}
	// Log in through basic_auth: the first navigation carries the
	// credentials in its URL, which the browser answers Caddy's 401
	// challenge with and keeps for the site's later requests.
	login := strings.Replace(base, "https://", "https://"+user+":"+url.PathEscape(password)+"@", 1)
	step("logging in", chromedp.Navigate(login+"/ops/"), chromedp.WaitVisible(chromedp.CSS("#user")))
	if who := text("#user"); who != user {
		t.Fatalf("signed in as %q, want %s", who, user)
	}
	row := `tr[data-order="` + got.order + `"]`
	step("opening the Orders page",
		chromedp.Navigate(base+"/ops/orders?profile="+e2eProfile),
		chromedp.WaitVisible(chromedp.CSS(row)))
	ordersText := text("#orders")
	step("revoking the certificate",
		chromedp.Click(chromedp.CSS(row+" a")),
		chromedp.WaitVisible(chromedp.CSS("#revoke")),
		chromedp.EmulateViewport(390, 844),
		shot("order-phone.png"),
		chromedp.Click(chromedp.CSS("#revoke")),
		chromedp.WaitVisible(chromedp.CSS("#reason")),
		chromedp.SetValue(chromedp.CSS("#reason"), "4"),
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".done")),
		shot("revoked-phone.png"))
	revocation := text("#revocation")
	step("opening the audit list",
		chromedp.EmulateViewport(1200, 900),
		chromedp.Navigate(base+"/ops/audit?order="+got.order),
		chromedp.WaitVisible(chromedp.CSS("#audit")),
		shot("audit.png"))
	auditText := text("#audit")
	step("opening the overview",
		chromedp.Navigate(base+"/ops/"),
		chromedp.WaitVisible(chromedp.CSS("#issued")),
		shot("overview.png"))
	issued, crlNumber := text("#issued"), text(".crl-number")
	t.Logf("screenshots in %s", shots)
	if !strings.Contains(ordersText, serial) || !strings.Contains(ordersText, "ui.example.com") {
		t.Errorf("the Orders page does not show serial %s for ui.example.com:\n%s", serial, ordersText)
	}
	if !strings.Contains(revocation, "revoked") || !strings.Contains(revocation, "superseded") {
		t.Errorf("the order's page after the revocation says %q; want revoked, reason superseded", revocation)
	}
	if !strings.Contains(auditText, "certificate_revoked") || !strings.Contains(auditText, "web_ui: "+user) {
		t.Errorf("the audit list lacks the revocation by %s:\n%s", user, auditText)
	}
	if issued != "1" || crlNumber == "" {
		t.Errorf("the overview counts %q issued, shows CRL number %q; want 1 and a number", issued, crlNumber)
	}
	// The CRL lists the serial.
	b.crl(t, got.leaf.SerialNumber)

	// The store agrees: revoked with reason 4, by alice through the page.
	o, err := activeApp(t).Operator().ShowOrder(ctx, got.order)
	if err != nil {
		t.Fatal(err)
	}
	if cert := o.Certificate; cert == nil || cert.RevokedAt == nil || cert.Reason == nil || *cert.Reason != 4 {
		t.Errorf("the order's certificate after the revocation: %+v", o.Certificate)
	}
}

// The README's forward_auth setup, run by a real Caddy in front of a
// stand-in for an SSO gateway (a token in, Remote-User out): the page
// takes its user from the auth service's answer, which the client cannot
// forge; the same placeholder on a route with no forward_auth is empty,
// so a forged Remote-User there is refused rather than signed in.
func TestTheWebPageBehindForwardAuthSignsInOnlyWhomTheAuthServiceNames(t *testing.T) {
	gateway := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != "bob's token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Remote-User", "bob")
	})}
	gln := e2eListen(t)
	go func() { _ = gateway.Serve(gln) }()
	t.Cleanup(func() { gateway.Close() })
	env := newE2EEnv(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraProfiles: fmt.Sprintf(`
	route /fa* {
		forward_auth 127.0.0.1:%d {
			uri /auth
			copy_headers Remote-User
		}
		acme_proxy_ui {
			prefix /fa
			user {http.reverse_proxy.header.Remote-User}
		}
	}
	route /nofa* {
		acme_proxy_ui {
			prefix /nofa
			user {http.reverse_proxy.header.Remote-User}
		}
	}
`, e2ePort(gln))})
	base := fmt.Sprintf("https://127.0.0.1:%d", env.HTTPSPort)
	tests := []struct {
		name       string
		path       string
		header     map[string]string
		wantStatus int
		wantSignIn string // the name the page shows, when 200
	}{
		{"ok/the gateway's user is signed in", "/fa/", map[string]string{"X-Token": "bob's token"}, http.StatusOK, "bob"},
		{"ok/a forged Remote-User beside a good token is replaced by the gateway's", "/fa/",
			map[string]string{"X-Token": "bob's token", "Remote-User": "mallory"}, http.StatusOK, "bob"},
		{"fail/a forged Remote-User without a token stops at the gateway", "/fa/", map[string]string{"Remote-User": "mallory"}, http.StatusUnauthorized, ""},
		{"fail/a forged Remote-User on a route without forward_auth is nobody", "/nofa/", map[string]string{"Remote-User": "mallory"}, http.StatusForbidden, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := env.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("GET %s: %d, want %d\n%s", tc.path, resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantSignIn != "" && !strings.Contains(string(body), `id="user">`+tc.wantSignIn+`<`) {
				t.Errorf("the page does not show %s signed in:\n%s", tc.wantSignIn, body)
			}
			if strings.Contains(string(body), "mallory") {
				t.Errorf("the page shows the forged name:\n%s", body)
			}
		})
	}
}

// A confirmation page's form stays good across a config reload, as it
// does across the instances on one database: its token is signed with a
// key the database keeps, not one each load draws.
func TestAConfirmationFormServedBeforeAReloadIsAcceptedAfterIt(t *testing.T) {
	env := newE2EEnv(t)
	cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraProfiles: `
	route /open* {
		acme_proxy_ui {
			prefix /open
			insecure_no_auth
		}
	}
`}
	env.load(t, cfg)
	idle, _, err := activeApp(t).queue.Enqueue(t.Context(), jobs.Spec{Kind: "test_idle", Key: "reload", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://127.0.0.1:%d/open/jobs/%d", env.HTTPSPort, idle.ID)
	status, page := getEventually(t, env.client, base+"/cancel")
	if status != http.StatusOK {
		t.Fatalf("the confirmation page: %d %s", status, page)
	}
	csrf := csrfOf(t, page)

	env.load(t, cfg) // caddy reload

	status, body := postForm(t, env.client, base+"/do-cancel", csrf, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	if status != http.StatusSeeOther {
		t.Fatalf("the form posted after the reload: %d, want 303\n%s", status, body)
	}
	j, err := activeApp(t).queue.Get(t.Context(), idle.ID)
	if err != nil || j.Status != store.JobCancelled {
		t.Errorf("the job is %v (%v); want cancelled", j.Status, err)
	}
}

// On plain http under a name that is not loopback (an operator's LAN
// page), a browser sends no Sec-Fetch-Site, so the same-origin check
// falls back to Origin, which must then be the page's own and not "null":
// the page's Referrer-Policy keeps it. A real chromium, resolving the
// name to loopback, confirms a job's cancel there.
func TestAChangeIsConfirmedFromAPlainHTTPPageUnderALANName(t *testing.T) {
	browser := browsertest.Chromium(t)
	const user, password = "carol", "lan password"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	env := newE2EEnv(t)
	port := freePort(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraSites: fmt.Sprintf(`
http://ops.test:%d {
	basic_auth {
		%s %s
	}
	acme_proxy_ui {
		prefix /ops
	}
}
`, port, user, hash)})
	idle, _, err := activeApp(t).queue.Enqueue(t.Context(), jobs.Spec{Kind: "test_idle", Key: "lan", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	bctx := uiChrome(ctx, t, browser, chromedp.Flag("host-resolver-rules", "MAP ops.test 127.0.0.1"))
	page := fmt.Sprintf("http://%s:%s@ops.test:%d/ops/jobs/%d/cancel", user, url.PathEscape(password), port, idle.ID)
	if err := chromedp.Do(bctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS(".done"))); err != nil {
		body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("confirming the cancel at %s: %v\n%s", page, err, body)
	}
	j, err := activeApp(t).queue.Get(t.Context(), idle.ID)
	if err != nil || j.Status != store.JobCancelled {
		t.Errorf("the job is %v (%v); want cancelled", j.Status, err)
	}
}

// The overview knows the kinds this process's runner handles: a ready job
// of a kind it does not (left by a profile since removed from the
// config) is counted there, and its own housekeeping is not.
func TestTheWebPagesOverviewCountsTheJobsOfKindsThisProcessDoesNotRun(t *testing.T) {
	env := newE2EEnv(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraProfiles: `
	route /open* {
		acme_proxy_ui {
			prefix /open
			insecure_no_auth
		}
	}
`})
	if _, _, err := activeApp(t).queue.Enqueue(t.Context(), jobs.Spec{Kind: "relay_issue_of_a_removed_profile", Key: "o1", Delay: -time.Minute}); err != nil {
		t.Fatal(err)
	}
	status, page := getEventually(t, env.client, fmt.Sprintf("https://127.0.0.1:%d/open/", env.HTTPSPort))
	if status != http.StatusOK {
		t.Fatalf("the overview: %d %s", status, page)
	}
	line := regexp.MustCompile(`(?s)<p class="warn" id="unrun">.*?</p>`).FindString(string(page))
	if !strings.Contains(line, "1 job of a kind nobody here runs") || !strings.Contains(line, ">relay_issue_of_a_removed_profile</a> (1)") {
		t.Errorf("the overview's line of jobs nobody here runs: %q\n%s", line, page)
	}
	for _, kind := range activeApp(t).runnerKinds() {
		if strings.Contains(line, ">"+kind+"<") {
			t.Errorf("the overview counts %s, which this process runs, as nobody's: %q", kind, line)
		}
	}
}

// The overview knows the kinds this process's runner handles: a job of a
// kind it does not, cancelled while it waited, still owes its Abandon
// (its order left as it was) and is counted there, linking to it.
func TestTheWebPagesOverviewCountsTheOwedAbandonsOfKindsThisProcessDoesNotRun(t *testing.T) {
	env := newE2EEnv(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraProfiles: `
	route /open* {
		acme_proxy_ui {
			prefix /open
			insecure_no_auth
		}
	}
`})
	q := activeApp(t).queue
	j, _, err := q.Enqueue(t.Context(), jobs.Spec{Kind: "signer_issue_of_a_removed_profile", Key: "o1", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://127.0.0.1:%d/open/", env.HTTPSPort)
	status, page := getEventually(t, env.client, base)
	if status != http.StatusOK {
		t.Fatalf("the overview: %d %s", status, page)
	}
	line := html.UnescapeString(regexp.MustCompile(`(?s)<p class="warn" id="unrun-abandons">.*?</p>`).FindString(string(page)))
	href := "/open/jobs?kind=signer_issue_of_a_removed_profile&status=cancelled&abandon_owed=true"
	if !strings.Contains(line, "1 cancelled job of a kind nobody here runs still owes its abandon") ||
		!strings.Contains(line, `<a href="`+href+`">signer_issue_of_a_removed_profile</a> (1)`) {
		t.Fatalf("the overview's line of owed abandons: %q\n%s", line, page)
	}
	status, list := getEventually(t, env.client, fmt.Sprintf("https://127.0.0.1:%d", env.HTTPSPort)+href)
	if want := fmt.Sprintf(`/open/jobs/%d"`, j.ID); status != http.StatusOK || !strings.Contains(string(list), want) ||
		!strings.Contains(string(list), "abandon pending on a runner of signer_issue_of_a_removed_profile") {
		t.Errorf("%s: %d, want job %d, its abandon pending:\n%s", href, status, j.ID, list)
	}
}

// Mounted the way Caddy mounts most things under a path, handle_path
// (which strips /ops before the page sees the request, so that the page
// itself answers at "/"), the page keeps /ops in its links, its
// stylesheet's address, its forms and its redirect after a change: a
// real chromium, behind basic_auth, clicks from the overview to a job and
// cancels it, styled all the way.
func TestThePageMountedWithHandlePathLinksUnderItsPath(t *testing.T) {
	browser := browsertest.Chromium(t)
	const user, password = "dave", "handle path password"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	env := newE2EEnv(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraProfiles: fmt.Sprintf(`
	handle_path /ops/* {
		basic_auth {
			%s %s
		}
		acme_proxy_ui
	}
`, user, hash)})
	idle, _, err := activeApp(t).queue.Enqueue(t.Context(), jobs.Spec{Kind: "test_idle", Key: "handle_path", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*e2eWait)
	defer cancel()
	bctx := uiChrome(ctx, t, browser)
	base := fmt.Sprintf("https://127.0.0.1:%d", env.HTTPSPort)
	login := strings.Replace(base, "https://", "https://"+user+":"+url.PathEscape(password)+"@", 1)
	// The first run starts the browser, with the test's deadline: a
	// deadline of its own would stop the browser with it.
	if err := chromedp.Do(bctx, chromedp.Navigate(login+"/ops/"), chromedp.WaitVisible(chromedp.CSS("#user"))); err != nil {
		t.Fatalf("the browser, logging in: %v", err)
	}
	// Each later step waits for what its page shows; a link that leads
	// off the page fails the step after a while, saying where the browser
	// is.
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, e2eWait/2)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			at, _ := chromedp.Run(bctx, chromedp.Location())
			body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("the browser, %s: %v; it is at %s, showing:\n%s", what, err, at, body)
		}
	}
	jobLink := fmt.Sprintf(`a[href$="/jobs/%d"]`, idle.ID)
	rules, err := chromedp.Run(bctx, chromedp.Evaluate[int]("Array.from(document.styleSheets).reduce((n, s) => n + s.cssRules.length, 0)"))
	if err != nil || rules == 0 {
		t.Errorf("the overview's stylesheets hold %d rules (%v); want ui.css's", rules, err)
	}
	step("following the Jobs link", chromedp.Click(chromedp.CSS(`nav a[href$="jobs"]`)), chromedp.WaitVisible(chromedp.CSS(jobLink)))
	step("opening the job", chromedp.Click(chromedp.CSS(jobLink)), chromedp.WaitVisible(chromedp.CSS(`a.danger[href$="/cancel"]`)))
	step("asking to cancel it", chromedp.Click(chromedp.CSS(`a.danger[href$="/cancel"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	step("confirming", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS(".done")))
	at, err := chromedp.Run(bctx, chromedp.Location())
	if want := fmt.Sprintf("%s/ops/jobs/%d?done=cancelled", base, idle.ID); err != nil || at != want {
		t.Errorf("after the cancel the browser is at %s (%v), want %s", at, err, want)
	}
	j, err := activeApp(t).queue.Get(t.Context(), idle.ID)
	if err != nil || j.Status != store.JobCancelled {
		t.Errorf("the job is %v (%v); want cancelled", j.Status, err)
	}
}

// csrfOf is the CSRF token of a confirmation page's form; the test fails
// without one.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the confirmation page:\n%s", page)
	}
	return m[1]
}

// postForm posts a page's form with its token to target, with the
// headers a browser would add (hdr), and returns the answer's status and
// body without following its redirect.
func postForm(t *testing.T, c *http.Client, target, csrf string, hdr http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, target, strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	client := *c
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
