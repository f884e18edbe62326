package caddyacmeproxy

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// An operator signed in to the page visits another site, whose page
// submits a form to the page's cancel of a job — holding even the
// operator's CSRF token, the strongest such attacker. A real chromium
// sends it with the operator's credentials, and the page refuses it for
// its origin: over https the browser says cross-site in Sec-Fetch-Site;
// over plain http under a LAN name it sends no Sec-Fetch-Site and the
// page reads Origin. The same form from the page itself then cancels the
// job.
func TestAFormAnotherSiteSubmitsToThePageInARealBrowserIsRefused(t *testing.T) {
	browser := browsertest.Chromium(t)
	const user, password = "dave", "csrf test password"
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	env := newE2EEnv(t)
	lanPort := freePort(t)
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), ExtraProfiles: fmt.Sprintf(uiSite, user, hash),
		ExtraSites: fmt.Sprintf("\nhttp://ops.test:%d {\n\tbasic_auth {\n\t\t%s %s\n\t}\n\tacme_proxy_ui {\n\t\tprefix /ops\n\t}\n}\n", lanPort, user, hash)})

	// The other site: a page that posts a form to target at once.
	var target, token string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s"><input type="hidden" name="csrf" value="%s"></form>`+
			`<script>document.getElementById("f").submit()</script>`, html.EscapeString(target), html.EscapeString(token))
	}))
	t.Cleanup(evil.Close)
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "evil.test", 1)

	for _, tc := range []struct {
		name string
		base string // the page's origin, as the operator's browser reaches it
	}{
		{"over https (Sec-Fetch-Site)", fmt.Sprintf("https://127.0.0.1:%d", env.HTTPSPort)},
		{"over plain http under a LAN name (Origin)", fmt.Sprintf("http://ops.test:%d", lanPort)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, _, err := activeApp(t).queue.Enqueue(t.Context(), jobs.Spec{Kind: "test_idle", Key: "csrf " + tc.name, Delay: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			confirm := fmt.Sprintf("%s/ops/jobs/%d/cancel", tc.base, job.ID)
			target = fmt.Sprintf("%s/ops/jobs/%d/do-cancel", tc.base, job.ID)
			token = uiCSRFToken(t, env, confirm, user, password)

			ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
			defer cancel()
			bctx := uiChrome(ctx, t, browser, chromedp.Flag("host-resolver-rules", "MAP ops.test 127.0.0.1, MAP evil.test 127.0.0.1"))
			login := strings.Replace(tc.base, "://", "://"+user+":"+url.PathEscape(password)+"@", 1)
			if err := chromedp.Do(bctx, chromedp.Navigate(login+"/ops/"), chromedp.WaitVisible(chromedp.CSS("#user"))); err != nil {
				t.Fatalf("signing in: %v", err)
			}
			var refusal string
			if err := chromedp.Do(bctx, chromedp.Navigate(evilURL), chromedp.WaitVisible(chromedp.CSS(".error"))); err != nil {
				body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
				t.Fatalf("the other site's form: %v\n%s", err, body)
			}
			refusal, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS(".error")))
			if err != nil || !strings.Contains(refusal, "not sent from this page's own origin") {
				t.Errorf("the page answered the other site's form with %q (%v); want it refused for its origin", refusal, err)
			}
			if j, err := activeApp(t).queue.Get(t.Context(), job.ID); err != nil || j.Status != store.JobReady {
				t.Fatalf("after the other site's form the job is %v (%v); want it ready", j.Status, err)
			}

			if err := chromedp.Do(bctx, chromedp.Navigate(confirm), chromedp.WaitVisible(chromedp.CSS("#confirm")),
				chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS(".done"))); err != nil {
				body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
				t.Fatalf("confirming from the page itself: %v\n%s", err, body)
			}
			if j, err := activeApp(t).queue.Get(t.Context(), job.ID); err != nil || j.Status != store.JobCancelled {
				t.Errorf("after the page's own form the job is %v (%v); want it cancelled", j.Status, err)
			}
		})
	}
}

// uiCSRFToken reads the CSRF token of user's forms from the confirmation
// page at page.
func uiCSRFToken(t *testing.T, env *e2eEnv, page, user, password string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, strings.Replace(page, "ops.test", "127.0.0.1", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = req.URL.Host
	if strings.Contains(page, "ops.test") {
		req.Host = strings.Replace(req.URL.Host, "127.0.0.1", "ops.test", 1)
	}
	req.SetBasicAuth(user, password)
	resp, err := env.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET %s: %d, no CSRF token:\n%s", page, resp.StatusCode, body)
	}
	return html.UnescapeString(string(m[1]))
}
