package caddyacmeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	xacme "golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A front that terminates TLS and forwards plain HTTP to the Caddy
// serving acme_proxy: here a second site of the same Caddy, https on the
// e2e HTTPS port, reverse_proxy to a plain-HTTP site on its own port
// (backPort) that serves the profile, and the operator's page under
// /open. Caddy's reverse_proxy keeps the
// Host and sends X-Forwarded-Proto; the back's server trusts the ranges
// in trusted (trusted_proxies), none when it is empty.
var e2eFrontCaddyfile = template.Must(template.New("Caddyfile").Parse(`{
	admin off
	persist_config off
	log {
		output file {{.Env.LogFile}}
	}
	storage file_system {{.Env.Storage}}
	skip_install_trust
	storage_clean_interval off
	local_certs
	default_bind 127.0.0.1
	http_port {{.Env.HTTPPort}}
	https_port {{.Env.HTTPSPort}}
	{{if .Trusted}}servers 127.0.0.1:{{.BackPort}} {
		trusted_proxies static {{.Trusted}}
	}{{end}}
	acme_proxy {
		database {{.Env.Database}}
	}
}

https://127.0.0.1:{{.Env.HTTPSPort}} {
	reverse_proxy 127.0.0.1:{{.BackPort}}
}

http://127.0.0.1:{{.BackPort}} {
	route /open* {
		acme_proxy_ui {
			prefix /open
			insecure_no_auth
		}
	}
	acme_proxy {
		profile ` + e2eProfile + `
		resolvers {{.Env.DNSAddr}}
		validation_ports {
			http {{.ValidationHTTP}}
			tls {{.ValidationTLS}}
		}
	}
}
`))

// e2eFront is one test's front and back.
type e2eFront struct {
	Env                           *e2eEnv
	BackPort                      int
	ValidationHTTP, ValidationTLS int
	Trusted                       string
}

// loadFront starts Caddy with the front and the back, and waits for the
// front's certificate.
func loadFront(t *testing.T, f e2eFront) {
	t.Helper()
	var b bytes.Buffer
	if err := e2eFrontCaddyfile.Execute(&b, f); err != nil {
		t.Fatal(err)
	}
	src := caddyfile.Format(b.Bytes())
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, nil)
	if err != nil {
		t.Fatalf("adapt: %v\n%s", err, src)
	}
	for _, w := range warnings {
		t.Errorf("adapt warning: line %d: %s", w.Line, w.Message)
	}
	load(t, cfgJSON)
	f.Env.running = true
	f.Env.trustLocalRoot(t)
	if status, body := getEventually(t, f.Env.client, f.Env.directoryURL(e2eProfile)); status != http.StatusOK {
		t.Fatalf("GET %s through the front: status %d, body %s", f.Env.directoryURL(e2eProfile), status, body)
	}
}

// e2eDirectoryURLs GETs a directory, sending header, and returns the
// URLs it advertises, by name.
func e2eDirectoryURLs(t *testing.T, c *http.Client, url string, header http.Header) map[string]string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", url, resp.StatusCode)
	}
	var dir map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&dir); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	urls := map[string]string{}
	for k, v := range dir {
		if s, ok := v.(string); ok {
			urls[k] = s
		}
	}
	if len(urls) < 4 {
		t.Fatalf("GET %s: the directory advertises %v; want newNonce, newAccount, newOrder and revokeCert at least", url, urls)
	}
	return urls
}

// checkURLsUnder fails unless every URL starts with prefix.
func checkURLsUnder(t *testing.T, urls map[string]string, prefix string) {
	t.Helper()
	for name, u := range urls {
		if !strings.HasPrefix(u, prefix) {
			t.Errorf("the directory's %s is %s; want it under %s", name, u, prefix)
		}
	}
}

// Behind a Caddy it trusts (trusted_proxies) that terminates TLS, the
// profile is the https:// URL its clients reach: the directory's URLs
// are https://, and a client issues through the front, every request's
// JWS url (RFC 8555 §6.4) being the https:// URL it posted to.
func TestBehindATrustedTLSTerminatingFrontClientsAreGivenHTTPSURLsAndIssue(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	loadFront(t, e2eFront{Env: env, BackPort: freePort(t), ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t), Trusted: "127.0.0.1/32"})

	front := fmt.Sprintf("https://127.0.0.1:%d/acme/%s/", env.HTTPSPort, e2eProfile)
	checkURLsUnder(t, e2eDirectoryURLs(t, env.client, env.directoryURL(e2eProfile), nil), front)

	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, env)
	names := []string{"front.example.com"}
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(names...))
	if err != nil {
		t.Fatalf("AuthorizeOrder through the front: %v", err)
	}
	if !strings.HasPrefix(order.URI, front) {
		t.Errorf("the order's URL is %s; want it under %s", order.URI, front)
	}
	for _, u := range order.AuthzURLs {
		e2eAccept(ctx, t, c, e2ePendingHTTP01(ctx, t, c, srv, u))
	}
	env.checkIssued(t, e2eFinishOrder(ctx, t, c, order, names), names...)
}

// X-Forwarded-Proto counts only from a proxy Caddy trusts: a front the
// back does not trust, or a client sending the header itself over plain
// HTTP, leaves the URLs those of the connection that reached the back.
func TestAnUntrustedXForwardedProtoChangesNoURL(t *testing.T) {
	tests := []struct {
		name    string
		trusted string // the back's trusted_proxies; "" for none
		direct  bool   // the client asks the back itself, not the front
	}{
		{"ok/a front the back does not trust", "", false},
		{"ok/a client asking the back with no trusted proxies", "", true},
		{"ok/a client asking the back outside its trusted proxies", "192.0.2.0/24", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			back := freePort(t)
			loadFront(t, e2eFront{Env: env, BackPort: back, ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Trusted: tc.trusted})

			url, want := env.directoryURL(e2eProfile), fmt.Sprintf("http://127.0.0.1:%d/acme/%s/", env.HTTPSPort, e2eProfile)
			if tc.direct {
				url = fmt.Sprintf("http://127.0.0.1:%d/acme/%s/directory", back, e2eProfile)
				want = fmt.Sprintf("http://127.0.0.1:%d/acme/%s/", back, e2eProfile)
			}
			checkURLsUnder(t, e2eDirectoryURLs(t, env.client, url, http.Header{"X-Forwarded-Proto": {"https"}}), want)
		})
	}
}

// A trusted proxy's X-Forwarded-Proto is the scheme when it is http or
// https (in any case; the last one sent, as Caddy's reverse_proxy reads
// it); anything else leaves the connection's scheme.
func TestATrustedProxysXForwardedProtoIsTheSchemeOnlyWhenItIsHTTPOrHTTPS(t *testing.T) {
	env := newE2EEnv(t)
	back := freePort(t)
	loadFront(t, e2eFront{Env: env, BackPort: back, ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Trusted: "127.0.0.1/32"})
	url := fmt.Sprintf("http://127.0.0.1:%d/acme/%s/directory", back, e2eProfile)

	tests := []struct {
		name   string
		protos []string // the X-Forwarded-Proto lines sent
		want   string   // the directory URLs' scheme
	}{
		{"ok/https", []string{"https"}, "https"},
		{"ok/in capitals", []string{"HTTPS"}, "https"},
		{"ok/the last of several lines", []string{"http", "https"}, "https"},
		{"ok/none sent", nil, "http"},
		{"ignored/another scheme", []string{"ftp"}, "http"},
		{"ignored/a list in one line", []string{"https, http"}, "http"},
		{"ignored/empty", []string{""}, "http"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, p := range tc.protos {
				h.Add("X-Forwarded-Proto", p)
			}
			checkURLsUnder(t, e2eDirectoryURLs(t, env.client, url, h), fmt.Sprintf("%s://127.0.0.1:%d/acme/%s/", tc.want, back, e2eProfile))
		})
	}
}

// The operator's page behind the same front: a browser that sends no
// Sec-Fetch-Site has its form checked by Origin, the front's https://
// one, which the page's own scheme matches only when the back trusts the
// front (its X-Forwarded-Proto); from a front it does not trust, the form
// is refused as another origin's.
func TestBehindATrustedTLSTerminatingFrontThePagesOwnFormsAreAccepted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted string
		want    int
	}{
		{"ok/a front the back trusts", "127.0.0.1/32", http.StatusSeeOther},
		{"refused/a front the back does not trust", "", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			loadFront(t, e2eFront{Env: env, BackPort: freePort(t), ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Trusted: tc.trusted})
			idle, _, err := activeApp(t).queue.Enqueue(t.Context(), jobs.Spec{Kind: "test_idle", Key: "front", Delay: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			origin := fmt.Sprintf("https://127.0.0.1:%d", env.HTTPSPort)
			base := fmt.Sprintf("%s/open/jobs/%d", origin, idle.ID)
			status, page := getEventually(t, env.client, base+"/cancel")
			if status != http.StatusOK {
				t.Fatalf("the confirmation page through the front: %d %s", status, page)
			}
			// As a browser sends it: its Origin, no Sec-Fetch-Site.
			status, body := postForm(t, env.client, base+"/do-cancel", csrfOf(t, page), http.Header{"Origin": {origin}})
			if status != tc.want {
				t.Fatalf("the page's form posted through the front: %d, want %d\n%s", status, tc.want, body)
			}
			j, err := activeApp(t).queue.Get(t.Context(), idle.ID)
			if cancelled := err == nil && j.Status == store.JobCancelled; cancelled != (tc.want == http.StatusSeeOther) {
				t.Errorf("the job is %v (%v); want cancelled: %v", j.Status, err, tc.want == http.StatusSeeOther)
			}
		})
	}
}
