package caddyacmeproxy

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
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
