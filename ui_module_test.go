package caddyacmeproxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/webui"
)

// The path a handler in front stripped (handle_path) is what the page's
// links put back; what would make a link lead to another host, or is not
// a stripped head of the path at all, is not used.
func TestTheStrippedPrefixIsOnlyAPathOfPlainSegmentsCutFromTheFront(t *testing.T) {
	tests := []struct {
		name, orig, path, want string
	}{
		{"ok/handle_path stripped /ops", "/ops/orders", "/orders", "/ops"},
		{"ok/handle_path stripped /ops from its root", "/ops/", "/", "/ops"},
		{"ok/two segments", "/admin/acme/jobs/3", "/jobs/3", "/admin/acme"},
		{"ok/nothing stripped", "/ops/orders", "/ops/orders", ""},
		{"fail/a rewrite to another path", "/legacy", "/orders", ""},
		{"fail/a doubled slash would link to host ops", "//ops/orders", "/orders", ""},
		{"fail/a dot segment", "/ops/../orders", "/orders", ""},
		{"fail/an escaped character", "/o%2Fps/orders", "/orders", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := httptest.NewRequest(http.MethodGet, "https://ops.example.test"+tc.orig, nil)
			r := httptest.NewRequest(http.MethodGet, "https://ops.example.test"+tc.path, nil)
			r = r.WithContext(context.WithValue(r.Context(), caddyhttp.OriginalRequestCtxKey, *orig))
			if got := strippedPrefix(r); got != tc.want {
				t.Errorf("strippedPrefix(%s seen as %s) = %q, want %q", tc.orig, tc.path, got, tc.want)
			}
		})
	}
}

// A page asked for while the app has not opened its store (its start
// failed, or the store is still out of reach at the request's deadline)
// is a 503 that says when to ask again, as the admin API's and the page's
// own are.
func TestAPageBeforeTheStoreOpenedIsA503WithRetryAfter(t *testing.T) {
	page, err := webui.New(webui.Config{Operator: &operator.Operator{}, Prefix: "/ops"})
	if err != nil {
		t.Fatal(err)
	}
	app := &App{ready: newStartGate()}
	app.ready.open(false)
	u := &UI{ui: page, app: app}
	w := httptest.NewRecorder()
	err = u.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "https://ops.example.test/ops/orders", nil), nil)
	he, ok := errors.AsType[caddyhttp.HandlerError](err)
	if !ok || he.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("ServeHTTP: %v; want a 503", err)
	}
	if got, want := w.Header().Get("Retry-After"), strconv.Itoa(int(operator.UnavailableRetryAfter/time.Second)); got != want {
		t.Errorf("Retry-After %q; want %s", got, want)
	}
}
