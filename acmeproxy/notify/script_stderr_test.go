package notify_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A failing script's job error, which operators list through the admin
// API and the CLI, says why in the script's own words — the first line
// it wrote on stderr, as the script signer's does — with the values of
// its arguments, which may be tokens, taken out.
func TestAFailingScriptsJobErrorHoldsItsFirstStderrLineWithoutItsArguments(t *testing.T) {
	tests := []struct {
		name    string
		body    string // the script, after #!/bin/sh
		args    []string
		timeout time.Duration
		want    string
		notWant []string
	}{
		{name: "the first line on stderr follows the exit status",
			body: "echo >&2\necho 'curl: (7) Failed to connect to hooks.example.com' >&2\necho 'a second line' >&2\nexit 3",
			want: "exited with status 3: curl: (7) Failed to connect to hooks.example.com", notWant: []string{"a second line"}},
		{name: "an argument the script repeats is taken out",
			body: "echo \"token $2 refused by $1\" >&2\nexit 1", args: []string{"--token", "s3cr3t-t0ken"},
			want: "exited with status 1: token [redacted arg 2] refused by [redacted arg 1]", notWant: []string{"s3cr3t-t0ken"}},
		{name: "a script that hangs says what it wrote before its timeout",
			body: "echo 'waiting for the lock' >&2\nexec sleep 30", timeout: 100 * time.Millisecond,
			want: "timed out after 100ms: waiting for the lock"},
		{name: "a script silent on stderr gets its exit status alone",
			body: "echo 'on stdout only'\nexit 4", want: "exited with status 4", notWant: []string{"on stdout only"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "hook.sh")
			if err := os.WriteFile(script, []byte("#!/bin/sh\ncat >/dev/null\n"+tc.body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			dst := notify.Destination{Type: notify.TypeScript, Command: script, Args: tc.args}
			r := newRig(t, notify.Options{Timeout: tc.timeout}, dst)
			ids := r.event(t, sampleEvent(acme.EventAccountCreated), dst)
			j := r.wait(t, ids[0])
			if j.Status != store.JobFailed || !strings.HasSuffix(j.LastError, tc.want) {
				t.Errorf("job %s, last error %q; want failed, ending in %q", j.Status, j.LastError, tc.want)
			}
			for _, s := range tc.notWant {
				if strings.Contains(j.LastError, s) {
					t.Errorf("last error %q holds %q", j.LastError, s)
				}
			}
		})
	}
}
