package notify_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// helperScript, set in the environment, makes the test binary a helper
// process standing for Caddy: it delivers one notification to that
// script and exits, running no test.
const helperScript = "NOTIFY_TEST_HELPER_SCRIPT"

func TestMain(m *testing.M) {
	if script := os.Getenv(helperScript); script != "" {
		d := notify.NewDeliverer(notify.Options{Timeout: time.Minute})
		dst := notify.Destination{Type: notify.TypeScript, Command: script}
		if err := d.Register(dst); err != nil {
			os.Exit(2)
		}
		job := &jobs.Job{ID: 1, Kind: notify.Kind, Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventAccountCreated))[0].Payload}
		d.Run(context.Background(), job)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A notification script that is running when Caddy dies (kill -9, out
// of memory) is killed with it, as the script signer's program is,
// rather than run on unattended with nobody to time it out.
func TestWhenCaddyIsKilledARunningNotifyScriptDiesWithIt(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := filepath.Join(dir, "hook.sh")
	body := "#!/bin/sh\necho $$ > " + pidFile + ".new && mv " + pidFile + ".new " + pidFile + "\nsleep 1000\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	caddy := exec.Command(os.Args[0])
	caddy.Env = append(os.Environ(), helperScript+"="+script)
	if err := caddy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Process.Kill(); _ = caddy.Wait() })
	pid := proctest.PidFrom(t, pidFile)
	// The script's group (its sleep, and the script should it outlive
	// Caddy) is this test's to clean up.
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	if err := caddy.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = caddy.Wait()
	if !proctest.Gone(pid) {
		t.Errorf("the notify script %d outlived Caddy", pid)
	}
}
