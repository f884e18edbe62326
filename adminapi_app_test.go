package caddyacmeproxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// The quickstart names no acme_proxy app: its handler pulls the app in.
// Caddy provisions the admin API before any app, so the admin API must
// still find that app once it runs — and keep finding it across a reload,
// which starts the new app before it stops the old one.
func TestTheAdminAPIServesTheAppThatOnlyAHandlerPulledIn(t *testing.T) {
	env := newE2EEnv(t) // Caddy's data directory in env.Dir (isolate)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin, NoAppOption: true}
	env.load(t, cfg)
	unloadAdminOnCleanup(t)

	for _, step := range []string{"after the start", "after a reload"} {
		if step == "after a reload" {
			env.load(t, cfg)
		}
		status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/profiles", "")
		if status != http.StatusOK || !bytes.Contains(body, []byte(`"`+e2eProfile+`"`)) {
			t.Fatalf("%s: GET /acme_proxy/profiles: %d %s, want 200 listing profile %q", step, status, body, e2eProfile)
		}
	}
	if _, err := os.Stat(filepath.Join(env.Dir, "data", "caddy", "acme_proxy", "acme_proxy.db")); err != nil {
		t.Errorf("the database is not in Caddy's data directory: %v", err)
	}
}

// A reload that fails leaves the old config serving; Caddy keeps the
// admin API it installed for the failed config, whose app is cleaned up.
// The operator's routes must still reach the app that serves, whether the
// config names the app or a handler pulled it in.
func TestTheAdminAPIServesTheRunningAppAfterAReloadThatFailed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		noAppOption bool
	}{
		{"the config names the app", false},
		{"a handler pulls the app in", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newE2EEnv(t)
			b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
			cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin, NoAppOption: tc.noAppOption}
			env.load(t, cfg)
			unloadAdminOnCleanup(t)

			bad := cfg
			bad.ExtraProfiles = "\tacme_proxy {\n\t\tprofile broken\n\t\tchallenges http-02\n\t}"
			badJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(env.caddyfile(t, bad)), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			if err := caddy.Load(badJSON, true); err == nil || !strings.Contains(err.Error(), "challenges") {
				t.Fatalf("reloading a config with an unknown challenge type: %v; want its error", err)
			}

			for _, route := range []string{"/acme_proxy/profiles", "/acme_proxy/orders", "/acme_proxy/jobs"} {
				status, body := b.adminCall(t, http.MethodGet, route, "")
				if status != http.StatusOK {
					t.Errorf("GET %s after the failed reload: %d %s; want 200 from the app still serving", route, status, body)
				}
				if route == "/acme_proxy/profiles" && !bytes.Contains(body, []byte(`"`+e2eProfile+`"`)) {
					t.Errorf("GET %s after the failed reload: %s; want the serving profile %q", route, body, e2eProfile)
				}
			}
		})
	}
}

// With no app to serve (a config without one loaded, a reload that failed
// before any app started, an app whose store is not open) the operator's
// routes answer 503, and say when to ask again as every other 503 of the
// operator's fronts does: the CLI or a script polling the admin API
// during a reload has nothing else to go by.
func TestAnAdminRequestWithNoAppToServeItIsA503WithRetryAfter(t *testing.T) {
	a := &AdminAPI{app: &App{}, log: zap.NewNop()}
	r := httptest.NewRequest(http.MethodGet, "/acme_proxy/orders", nil)
	w := httptest.NewRecorder()
	err := a.serve(w, r)
	if ae, ok := errors.AsType[caddy.APIError](err); !ok || ae.HTTPStatus != http.StatusServiceUnavailable {
		t.Fatalf("serve: %v; want a 503", err)
	}
	want := strconv.Itoa(int(operator.UnavailableRetryAfter / time.Second))
	if got := w.Header().Get("Retry-After"); got != want {
		t.Errorf("Retry-After %q; want %s", got, want)
	}
}
