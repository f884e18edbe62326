package webui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/forwarded"
)

// Behind a front that terminates TLS, the browser's Origin is the
// front's https:// while the page is reached over plain HTTP: a form
// from the page's own origin, sent without Sec-Fetch-Site, passes when
// the glue says a trusted proxy's client used https, and is refused
// when nothing says so (any client could claim it).
func TestAFormBehindATrustedTLSTerminatingFrontIsCheckedAgainstTheFrontsScheme(t *testing.T) {
	for _, tc := range []struct {
		name   string
		proto  string // what the glue passes of a trusted proxy's X-Forwarded-Proto; "" for nothing
		origin string
		ok     bool
	}{
		{"ok/the page's https origin through a trusted front", "https", "https://ops.example.test", true},
		{"refused/an https origin with nothing forwarded", "", "https://ops.example.test", false},
		{"refused/an http origin through a trusted https front", "https", "http://ops.example.test", false},
		{"ok/an http origin with nothing forwarded", "", "http://ops.example.test", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			form := url.Values{"csrf": {f.ui.csrfToken(testUser)}}
			r := httptest.NewRequest(http.MethodPost, "http://ops.example.test"+f.path(fmt.Sprintf("/ops/jobs/%d/do-cancel", f.job)), strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("X-Test-User", testUser)
			r.Header.Set("Origin", tc.origin)
			if tc.proto != "" {
				r = r.WithContext(forwarded.WithProto(r.Context(), tc.proto))
			}
			w := httptest.NewRecorder()
			f.ui.ServeHTTP(w, r)
			refused := w.Code == http.StatusForbidden && strings.Contains(w.Body.String(), "origin")
			if refused == tc.ok {
				t.Fatalf("status %d; want it refused for its origin: %v\n%s", w.Code, !tc.ok, w.Body)
			}
		})
	}
}
