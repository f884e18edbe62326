package notify_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// A notification script that started a program of its own (a shell
// script's curl, say) leaves nothing running behind, whether it hung
// until its timeout or exited: else each retry of a hanging delivery
// would leave one more process behind.
func TestAScriptLeavesNothingItStartedRunningAfterItsAttempt(t *testing.T) {
	tests := []struct {
		name     string
		tail     string // what the script does after starting its child
		timeout  time.Duration
		wantKind string
		// childStderr: the child keeps the script's stderr, which the
		// delivery reads, open past the script's exit.
		childStderr bool
	}{
		{"a script that hangs until its timeout", "sleep 1000", 200 * time.Millisecond, "retry", false},
		{"a script that exits", "exit 0", time.Minute, "done", false},
		{"a script that exits while its child holds its stderr", "exit 0", time.Minute, "done", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pid")
			script := filepath.Join(dir, "hook.sh")
			redirect := " 2>&1"
			if tt.childStderr {
				redirect = ""
			}
			body := "#!/bin/sh\nsleep 1000 </dev/null >/dev/null" + redirect + " &\necho $! > " + pidFile + "\n" + tt.tail + "\n"
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			d := notify.NewDeliverer(notify.Options{Timeout: tt.timeout})
			dst := notify.Destination{Type: notify.TypeScript, Command: script}
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			job := &jobs.Job{ID: 1, Kind: notify.Kind, Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventAccountCreated))[0].Payload}
			if out := d.Run(context.Background(), job); out.Kind() != tt.wantKind {
				t.Fatalf("outcome %s; want %s", out, tt.wantKind)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatalf("the script wrote no pid: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if !proctest.Gone(pid) {
				_ = proctest.Kill(pid)
				t.Errorf("the script's child %d outlived its attempt", pid)
			}
		})
	}
}
