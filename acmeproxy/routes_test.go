package acmeproxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
)

// routeRecorder is a Metrics that keeps the route names of requests.
type routeRecorder struct {
	authority.NopMetrics
	mu     sync.Mutex
	routes []string
}

func (m *routeRecorder) Request(_, route string, _ int, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.routes = append(m.routes, route)
}

func (m *routeRecorder) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.routes) == 0 {
		return ""
	}
	return m.routes[len(m.routes)-1]
}

func TestEveryRequestIsCountedUnderItsRoutesNameNeverAResourceID(t *testing.T) {
	rec := &routeRecorder{}
	e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Metrics = rec }})
	tests := []struct {
		name, method, path, want string
	}{
		{"ok/the directory", http.MethodGet, "/directory", "directory"},
		{"ok/the directory at the prefix", http.MethodGet, "", "directory"},
		{"ok/the directory at the prefix with a slash", http.MethodGet, "/", "directory"},
		{"ok/a nonce by HEAD", http.MethodHead, "/new-nonce", "new-nonce"},
		{"ok/new-account", http.MethodPost, "/new-account", "new-account"},
		{"ok/new-order", http.MethodPost, "/new-order", "new-order"},
		{"ok/key-change", http.MethodPost, "/key-change", "key-change"},
		{"ok/revoke-cert", http.MethodPost, "/revoke-cert", "revoke-cert"},
		{"ok/ca.pem", http.MethodGet, "/ca.pem", "ca.pem"},
		{"ok/the CRL", http.MethodGet, "/crl", "crl"},
		{"ok/an issuing CA's CRL", http.MethodGet, "/crl/abc", "crl"},
		{"ok/an account", http.MethodPost, "/account/abc", "account"},
		{"ok/an account's orders", http.MethodPost, "/account/abc/orders", "account/orders"},
		{"ok/an order", http.MethodPost, "/order/abc", "order"},
		{"ok/a finalize", http.MethodPost, "/order/abc/finalize", "order/finalize"},
		{"ok/an authorization", http.MethodPost, "/authz/abc", "authz"},
		{"ok/a challenge", http.MethodPost, "/chall/abc", "chall"},
		{"ok/a certificate", http.MethodPost, "/cert/abc", "cert"},
		{"ok/renewal information", http.MethodGet, "/renewal-info/abc.def", "renewal-info"},
		{"ok/a wrong method keeps the route's name", http.MethodGet, "/order/abc/finalize", "order/finalize"},
		{"ok/an unknown resource is other", http.MethodPost, "/order/abc/refund", "other"},
		{"ok/a resource without an id is other", http.MethodPost, "/order/", "other"},
		{"ok/an unknown path is other", http.MethodGet, "/nothing-here", "other"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.plain(tc.method, e.url(tc.path))
			if got := rec.last(); got != tc.want {
				t.Errorf("%s %s counted as route %q (status %d); want %q", tc.method, tc.path, got, r.status, tc.want)
			}
			// A CRL and the CA chain are served without one: they are
			// cacheable public objects.
			cacheable := strings.HasPrefix(tc.path, "/crl") || tc.path == "/ca.pem"
			if r.header.Get("Replay-Nonce") == "" && !(r.status == http.StatusOK && cacheable) {
				t.Errorf("%s %s: no Replay-Nonce", tc.method, tc.path)
			}
		})
	}
}

func TestAPathBelowThePrefixThatNamesNoResourceIsA404ProblemDocument(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, path := range []string{"/nothing-here", "/order/", "/order/abc/refund", "/directory/", "/account/a/b/c"} {
		t.Run(path, func(t *testing.T) {
			r := e.plain(http.MethodPost, e.url(path))
			if r.status != http.StatusNotFound || r.problem == nil || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("POST %s: %d %q %s; want a 404 problem document", path, r.status, r.header.Get("Content-Type"), r.body)
			}
		})
	}
}

// A path below the prefix that is not in its canonical form (an empty
// segment, "." or "..") names no resource: it is answered, under every
// method, with a 404 problem document and a fresh nonce, as any other
// unknown path is, never with the router's redirect to the cleaned path,
// which a client would follow with a JWS whose "url" no longer matches.
func TestANonCanonicalPathBelowThePrefixIsA404ProblemDocumentNotARedirect(t *testing.T) {
	e := newTestEnv(t, nil)
	noRedirects := *e.ts.Client()
	noRedirects.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tests := []struct{ name, method, path string }{
		{"a double slash before new-order", http.MethodPost, "//new-order"},
		{"a double slash before the directory", http.MethodGet, "//directory"},
		{"a double slash inside an order's path", http.MethodPost, "/order//abc"},
		{"a dot segment", http.MethodPost, "/./new-order"},
		{"a dot-dot segment back to new-order", http.MethodPost, "/order/../new-order"},
		{"a trailing dot segment", http.MethodGet, "/new-nonce/."},
		{"a double slash after the prefix alone", http.MethodGet, "//"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, e.url(tc.path), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r := readResponse(t, resp)
			if r.status != http.StatusNotFound || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Location") != "" {
				t.Fatalf("%s %s: %d %q Location %q %s; want a 404 problem document", tc.method, tc.path, r.status, r.header.Get("Content-Type"), r.header.Get("Location"), r.body)
			}
			if r.problem == nil || r.problem.Type != vocab.ErrorMalformed {
				t.Errorf("%s %s: problem %s; want %s", tc.method, tc.path, r.body, vocab.ErrorMalformed)
			}
			if r.header.Get("Replay-Nonce") == "" {
				t.Errorf("%s %s: no Replay-Nonce", tc.method, tc.path)
			}
		})
	}
}
