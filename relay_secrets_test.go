package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// An operator whose upstream sits behind a gateway wanting credentials
// writes them into the relay's directory URL: a user and a password, a
// token in the query. Whatever the upstream does — nothing at all, or a
// gateway's error page quoting the request — what the operator is shown
// of the relay (its log lines, the relay job's last error through the
// admin API, the order the operator gave up on, its audit row) names the
// upstream without any of them, in any encoding.
func TestARelayDirectorysCredentialsAreInNoLogLineNorAnyAdminAnswer(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(*relayPebble)
	}{
		{"fail/the upstream unreachable", func(p *relayPebble) { p.down.Store(true) }},
		{"fail/a gateway's 502 page quoting the request", func(p *relayPebble) { p.gateway.Store(true) }},
	}
	// The password and the token hold characters that end a URL in
	// prose, and percent-encoded ones ('@', '+'); each piece below is in
	// every form they take in a text.
	const userinfo, query = "relayuser:s3cr%40t(pw)X@", "?token=tok(en)Secret123&key=k%2Bey456"
	secretParts := []string{"relayuser", "s3cr", "(pw)X", "Secret123", "ey456"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			core, logs := observer.New(zap.DebugLevel)
			b := newRelayBench(t)
			b.directory = strings.Replace(b.pebble.dir, "://", "://"+userinfo, 1) + query
			b.logger = zap.New(core)
			p := b.start()
			c := p.client(t, ctx)
			o := b.readyOrder(t, ctx, c, "gated.example.com")
			id := path.Base(o.URI)

			tt.break_(b.pebble)
			finalizing, stop := context.WithCancel(ctx)
			defer stop()
			go func() { _, _, _ = c.CreateOrderCert(finalizing, o.FinalizeURL, relayCSR(t, "gated.example.com"), true) }()
			relayWaitFor(t, 30*time.Second, "two failed relay attempts", func() bool {
				j, ok := relayJob(t, p.queue, id)
				return ok && j.Attempts >= 2 && j.LastError != ""
			})

			a := &AdminAPI{app: startedApp(p.db, p.queue), log: zap.NewNop()}
			a.app.profiles[p.srv.Profile()] = p.srv
			call := func(method, route string) string {
				t.Helper()
				w := httptest.NewRecorder()
				if err := a.serve(w, httptest.NewRequest(method, adminBase+route, nil).WithContext(ctx)); err != nil {
					var ae caddy.APIError
					if !errors.As(err, &ae) {
						t.Fatalf("%s %s: %v", method, route, err)
					}
					return fmt.Sprintf("%d %v", ae.HTTPStatus, ae.Err)
				}
				return w.Body.String()
			}
			j, _ := relayJob(t, p.queue, id)
			job := strconv.FormatInt(j.ID, 10)
			seen := map[string]string{
				"the relay job":     call(http.MethodGet, "jobs/"+job),
				"the jobs listed":   call(http.MethodGet, "jobs?kind=relay_issue"),
				"the job cancelled": call(http.MethodPost, "jobs/"+job+"/cancel"),
			}
			// The operator gives up: the runner abandons the relay,
			// failing the order with its reason.
			relayWaitFor(t, 30*time.Second, "the order failed", func() bool {
				o, err := p.db.GetOrder(ctx, p.srv.Profile(), id)
				return err == nil && o.Status == "invalid"
			})
			seen["the order"] = call(http.MethodGet, "orders/"+id)
			seen["the audit"] = call(http.MethodGet, "audit?order="+id)
			for i, e := range logs.All() {
				seen[fmt.Sprintf("log line %d", i)] = fmt.Sprintf("%s %v", e.Message, e.ContextMap())
			}

			for what, text := range seen {
				for _, part := range secretParts {
					if strings.Contains(text, part) {
						t.Errorf("%s holds a secret (%q):\n%s", what, part, text)
					}
				}
			}
			var shown struct {
				LastError string `json:"last_error"`
			}
			if err := json.Unmarshal([]byte(seen["the relay job"]), &shown); err != nil {
				t.Fatalf("%v: %s", err, seen["the relay job"])
			}
			if want := b.pebble.dir + "?token&key"; !strings.Contains(shown.LastError, want) {
				t.Errorf("the job's last error %q does not name the upstream as %s", shown.LastError, want)
			}
			if !strings.Contains(seen["the order"], "relay") || !strings.Contains(seen["the audit"], id) {
				t.Errorf("the order %s or the audit %s does not show the failure", seen["the order"], seen["the audit"])
			}
		})
	}
}
