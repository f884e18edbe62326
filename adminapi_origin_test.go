package caddyacmeproxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The operator's routes are served by Caddy's admin endpoint, whose checks
// they rely on: a web page of another origin that the operator's browser
// visits cannot change anything through them — not by a form (its Origin
// is the page's), not by fetch in no-cors mode, not from a sandboxed frame
// (Origin null), not by DNS rebinding (the Host is the page's name) — and
// a GET, which a page can make without any of those headers (an <img>),
// changes nothing either. The CLI's request, from the admin endpoint's own
// origin, does.
func TestTheAdminRoutesRefuseAChangeFromAWebPageOfAnotherOrigin(t *testing.T) {
	env := newE2EEnv(t)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env.load(t, e2eConfig{ValidationHTTP: freePort(t), ValidationTLS: freePort(t), Admin: admin})
	unloadAdminOnCleanup(t)
	db := activeApp(t).db
	j, _, err := db.EnqueueJob(t.Context(), store.NewJob{Kind: "notify_deliver", RunAt: time.Now().Add(time.Hour), MaxAttempts: 3}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cancel := fmt.Sprintf("/acme_proxy/jobs/%d/cancel", j.ID)
	send := func(t *testing.T, method, host string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+admin+cancel, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	tests := []struct {
		name   string
		method string
		host   string
		hdr    map[string]string
	}{
		{"a form posted from another origin", http.MethodPost, admin, map[string]string{"Origin": "https://evil.example",
			"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Content-Type": "text/plain"}},
		{"a form posted by a browser that sends no Sec-Fetch-*", http.MethodPost, admin, map[string]string{"Origin": "https://evil.example",
			"Content-Type": "application/x-www-form-urlencoded"}},
		{"a no-cors fetch", http.MethodPost, admin, map[string]string{"Origin": "https://evil.example",
			"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}},
		{"a sandboxed frame's form (Origin null)", http.MethodPost, admin, map[string]string{"Origin": "null"}},
		{"a page whose name was rebound to the admin address", http.MethodPost, "evil.example:" + admin[strings.LastIndex(admin, ":")+1:],
			map[string]string{"Origin": "http://evil.example:" + admin[strings.LastIndex(admin, ":")+1:], "Sec-Fetch-Site": "same-origin"}},
		{"a GET without any browser header", http.MethodGet, admin, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := send(t, tc.method, tc.host, tc.hdr)
			if status < 400 {
				t.Errorf("%s %s: %d %s; want it refused", tc.method, cancel, status, body)
			}
			if got, err := db.GetJob(t.Context(), j.ID); err != nil || got.Status != store.JobReady {
				t.Fatalf("after the refused request the job is %v (%v); want it ready", got.Status, err)
			}
		})
	}
	t.Run("the CLI's request, from the admin endpoint's own origin", func(t *testing.T) {
		status, body := send(t, http.MethodPost, admin, map[string]string{"Origin": "http://" + admin, "Content-Type": "application/json"})
		if status != http.StatusOK {
			t.Fatalf("POST %s: %d %s; want 200", cancel, status, body)
		}
		if got, err := db.GetJob(t.Context(), j.ID); err != nil || got.Status != store.JobCancelled {
			t.Errorf("the job is %v (%v); want it cancelled", got.Status, err)
		}
	})
}
