package acmeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/signer/script"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A script signer's program that prints a secret its configuration passed
// it (SIGN_TOKEN, from `env SIGN_TOKEN {env.X}`) and fails leaves no trace
// of it anywhere its output reaches: the job's last error, the order's
// failure detail, the audit trail, the logs; and the client's problem
// document carries none of the program's output at all.
func TestAScriptSignersSecretThatItsProgramPrintsIsInNoRecordLogOrProblem(t *testing.T) {
	const secret = "tok-9f86d081884c7d65"
	tests := []struct {
		name      string
		body      string
		wantType  string // the problem the client sees
		wantEvent string // the audit row of the failure
	}{
		{name: "a failure given up", body: `echo "curl: (22) 401 for https://signer:$SIGN_TOKEN@pki.example.com/sign" >&2; exit 1`,
			wantType: "urn:ietf:params:acme:error:serverInternal", wantEvent: "certificate_issue_failed"},
		{name: "a refusal", body: `echo "rejectedIdentifier: curl: (22) 403 for token $SIGN_TOKEN" >&2; exit 2`,
			wantType: "urn:ietf:params:acme:error:rejectedIdentifier", wantEvent: "certificate_issue_failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				prog := filepath.Join(t.TempDir(), "sign")
				if err := os.WriteFile(prog, []byte("#!/bin/sh\ncat >/dev/null\n"+tt.body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				sg, err := script.New(script.Options{Command: []string{prog}, MaxAttempts: 1,
					Env: map[string]string{"SIGN_TOKEN": secret}})
				if err != nil {
					t.Fatal(err)
				}
				core, logs := observer.New(zap.DebugLevel)
				log := zap.New(core)
				e := newTestEnvWith(t, envOptions{
					opts:   func(o *Options) { o.Logger = log },
					wrap:   func(*localca.Signer) signer.Signer { return sg },
					runner: jobs.RunnerOptions{Logger: log},
					profileHandlers: func(p authority.Profiles) []jobs.Handler {
						return authority.SignerJobHandlers(p, p.(staticProfiles).All(), log)
					}})
				c, o, csr := readyOrder(t, ctx, e, "leak.example.com")
				id := path.Base(o.URI)
				finalize := e.raw(c).post(o.FinalizeURL, map[string]string{"csr": b64(csr)}, jwsOpts{})
				var polled rawResponse
				var got struct {
					Status string
					Error  struct{ Type, Detail string }
				}
				for deadline := time.Now().Add(20 * time.Second); got.Status != "invalid"; {
					if time.Now().After(deadline) {
						t.Fatalf("the order is %q after 20s; want invalid", got.Status)
					}
					time.Sleep(20 * time.Millisecond)
					polled = e.raw(c).post(o.URI, nil, jwsOpts{})
					if err := json.Unmarshal(polled.body, &got); err != nil {
						t.Fatalf("polling the order: %d %s", polled.status, polled.body)
					}
				}
				if polled.status != http.StatusOK || got.Error.Type != tt.wantType {
					t.Errorf("the client sees the order %d %s; want invalid with %s", polled.status, polled.body, tt.wantType)
				}
				for what, body := range map[string][]byte{"the finalize": finalize.body, "the order": polled.body} {
					if s := string(body); strings.Contains(s, secret) || strings.Contains(s, "SIGN_TOKEN") || strings.Contains(s, "curl") {
						t.Errorf("%s answers the client with the program's output: %s", what, s)
					}
				}

				// What the operator reads: the program's reason, the
				// variable named instead of its value.
				const redacted = "[redacted env SIGN_TOKEN]"
				// The job's row is settled after the order (Abandon first).
				var js []jobs.Job
				for deadline := time.Now().Add(20 * time.Second); len(js) != 1 || js[0].FinishedAt.IsZero(); time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the order's script job is not settled after 20s: %+v", js)
					}
					if js, err = e.queue.List(ctx, store.JobFilter{Kind: script.IssueKind, Key: id}); err != nil {
						t.Fatal(err)
					}
				}
				sum, err := e.db.OrderByID(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				evs, err := e.db.SearchAudit(ctx, store.AuditFilter{OrderID: id, Event: tt.wantEvent})
				if err != nil || len(evs) != 1 {
					t.Fatalf("%s audit rows: %d %v; want 1", tt.wantEvent, len(evs), err)
				}
				kept := map[string]string{"the job's last error": js[0].LastError, "the order's failure detail": sum.FailureDetail,
					"the audit row's detail": evs[0].Detail}
				if tt.wantType != "urn:ietf:params:acme:error:serverInternal" {
					delete(kept, "the job's last error") // a refusal is no error: the job is done
				}
				for what, v := range kept {
					if strings.Contains(v, secret) || !strings.Contains(v, redacted) {
						t.Errorf("%s is %q; want the program's reason with %s", what, v, redacted)
					}
				}
				all, err := e.db.SearchAudit(ctx, store.AuditFilter{OrderID: id})
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range all {
					if s := fmt.Sprintf("%+v", ev); strings.Contains(s, secret) {
						t.Errorf("audit row %s holds the secret: %s", ev.Event, s)
					}
				}
				if len(logs.All()) == 0 {
					t.Fatal("nothing was logged")
				}
				for _, l := range logs.All() {
					if s := fmt.Sprintf("%s %v", l.Message, l.ContextMap()); strings.Contains(s, secret) {
						t.Errorf("a log line holds the secret: %s", s)
					}
				}
			})
		})
	}
}
