package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// An operator rotates a webhook's bearer token (its {env.*} placeholder
// now holds the new one) and reloads Caddy while a notification is still
// being retried: the queued delivery reaches the receiver with the new
// token, and the destination the admin API shows in the job neither
// changes with the token nor carries it.
func TestAReloadThatRotatesAWebhooksBearerTokenDeliversTheQueuedNotificationWithTheNewToken(t *testing.T) {
	const oldToken, newToken = "old-token-e2e", "new-token-e2e"
	t.Setenv("E2E_HOOK_TOKEN", oldToken)
	var (
		mu   sync.Mutex
		auth []string // the Authorization of each delivery attempt
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+newToken {
			// The receiver already expects the new token: come back soon.
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer hook.Close()
	attempts := func(token string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range auth {
			if a == "Bearer "+token {
				n++
			}
		}
		return n
	}
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s never happened; attempts carried %q", what, auth)
			}
		}
	}

	env := newE2EEnv(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin,
		AppExtra: fmt.Sprintf("notify webhook %s/acme {\n header Authorization \"Bearer {env.E2E_HOOK_TOKEN}\"\n events %s\n}",
			hook.URL, acme.EventAccountCreated)}
	env.load(t, cfg)
	unloadAdminOnCleanup(t)
	job := func() operator.JobView {
		t.Helper()
		status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/jobs?kind="+notify.Kind, "")
		var jobs operator.Page[operator.JobView]
		if status != http.StatusOK || json.Unmarshal(body, &jobs) != nil || len(jobs.Items) != 1 {
			t.Fatalf("the notify_deliver jobs: %d %s; want one", status, body)
		}
		return jobs.Items[0]
	}
	destination := func(j operator.JobView) string {
		t.Helper()
		var p struct {
			Destination string `json:"destination"`
		}
		if err := json.Unmarshal(j.Payload, &p); err != nil || p.Destination == "" {
			t.Fatalf("job payload %s names no destination", j.Payload)
		}
		return p.Destination
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	newE2EXCrypto(ctx, t, env) // account_created
	waitFor("a delivery with the old token", e2eWait, func() bool { return attempts(oldToken) > 0 })
	before := job()
	if before.Status == "done" {
		t.Fatalf("the delivery with the old token was accepted: %+v", before)
	}

	t.Setenv("E2E_HOOK_TOKEN", newToken)
	env.load(t, cfg)
	// The next attempt comes after the runner's backoff (30 s, ±10 %),
	// counted from the refused one.
	waitFor("a delivery with the new token", e2eWait+40*time.Second, func() bool { return attempts(newToken) > 0 })
	var after operator.JobView
	waitFor("the delivery's job settling", e2eWait, func() bool { after = job(); return after.Status == "done" })

	if destination(before) != destination(after) {
		t.Errorf("the job's destination was %q before the rotation and %q after; want it unchanged", destination(before), destination(after))
	}
	for _, j := range []operator.JobView{before, after} {
		if s := fmt.Sprintf("%+v %s", j, j.Payload); strings.Contains(s, oldToken) || strings.Contains(s, newToken) {
			t.Errorf("the admin API's job carries the token: %s", s)
		}
	}
}

// Profiles may send to one receiver each with its own token, as before
// destinations were identified without their secrets; one notify list
// holding the same receiver twice, differing only in a token, is refused
// at load: a queued delivery could not tell which token it was owed.
func TestNotifyDestinationsThatDifferOnlyInTheirSecretsLoadOnlyInDifferentProfiles(t *testing.T) {
	hook := func(token string) map[string]any {
		return map[string]any{"type": "webhook", "url": "https://hooks.example.com/acme",
			"headers": map[string]string{"Authorization": "Bearer " + token}}
	}
	tests := []struct {
		name     string
		app      map[string]any
		handlers []map[string]any
		want     string // "" for a config that loads
	}{
		{name: "two profiles, one receiver, a token each",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "notify": []any{hook("token-a")}}, {"handler": "acme_proxy", "profile": "b", "notify": []any{hook("token-b")}}}},
		{name: "a profile's token and the app's for the same receiver",
			app:      map[string]any{"notify": []any{hook("token-app")}},
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "notify": []any{hook("token-a")}}, {"handler": "acme_proxy", "profile": "b"}}},
		{name: "one list holding the receiver twice with two tokens",
			handlers: []map[string]any{{"handler": "acme_proxy", "profile": "a", "notify": []any{hook("token-a"), hook("token-b")}}},
			want:     "notify webhook: two destinations to webhook hooks.example.com differ only in their secrets"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := loadHandlers(t, isolate(t), tc.app, tc.handlers)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("load: %v; want it to load", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("load: %v; want an error containing %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "token-"):
				t.Errorf("the error quotes a token: %v", err)
			}
		})
	}
}

// A notify script's arguments take placeholders, as a webhook's header
// does: the script is run with the {env.*} value (one unknown at load,
// a request's, is kept as written), and that value, a token
// as the README allows, appears neither in the delivery's last error
// (where the script's stderr is shown, its arguments redacted) nor in
// the admin API's job nor in Caddy's log.
func TestANotifyScriptIsRunWithItsArgumentsPlaceholdersReplacedAndNeverShowsTheirValues(t *testing.T) {
	const token = "notify-arg-token-e2e"
	t.Setenv("E2E_NOTIFY_TOKEN", token)
	dir := t.TempDir()
	got := filepath.Join(dir, "args")
	script := filepath.Join(dir, "notify.sh")
	body := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$@\" > %s\necho \"receiver refused token $1\" >&2\nexit 1\n", got)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}

	env := newE2EEnv(t)
	b := &revokeBench{env: env, admin: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cfg := e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: b.admin,
		AppExtra: fmt.Sprintf("notify script %s {env.E2E_NOTIFY_TOKEN} {http.request.host} {\n events %s\n}", script, acme.EventAccountCreated)}
	env.load(t, cfg)
	unloadAdminOnCleanup(t)

	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	newE2EXCrypto(ctx, t, env) // account_created

	var job operator.JobView
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(20 * time.Millisecond) {
		status, body := b.adminCall(t, http.MethodGet, "/acme_proxy/jobs?kind="+notify.Kind, "")
		var jobs operator.Page[operator.JobView]
		if status != http.StatusOK || json.Unmarshal(body, &jobs) != nil || len(jobs.Items) > 1 {
			t.Fatalf("the notify_deliver jobs: %d %s; want at most one", status, body)
		}
		if len(jobs.Items) == 1 && jobs.Items[0].LastError != "" {
			job = jobs.Items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery attempt failed within %s: %s", e2eWait, body)
		}
	}
	args, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("the script did not run: %v", err)
	}
	// A placeholder unknown when the config loads is kept as written.
	if want := token + "\n{http.request.host}\n"; string(args) != want {
		t.Errorf("the script was run with the arguments %q; want %q", args, want)
	}
	if want := "receiver refused token [redacted arg 1]"; !strings.Contains(job.LastError, want) {
		t.Errorf("the job's last error %q does not contain %q", job.LastError, want)
	}
	if s := fmt.Sprintf("%+v %s", job, job.Payload); strings.Contains(s, token) {
		t.Errorf("the admin API's job carries the token: %s", s)
	}
	if log, err := os.ReadFile(env.LogFile); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(log), token) {
		t.Errorf("Caddy's log carries the token:\n%s", log)
	}
}
