package script

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
)

// helperProgram, set in the environment, makes the test binary a helper
// process standing for Caddy: it runs that program through execute and
// exits, running no test.
const helperProgram = "SCRIPT_TEST_HELPER_PROGRAM"

func TestMain(m *testing.M) {
	if prog := os.Getenv(helperProgram); prog != "" {
		_, _ = execute(context.Background(), run{Argv: []string{prog}, Timeout: time.Minute})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestWhenCaddyIsKilledTheProgramIsKilledBeforeItSigns(t *testing.T) {
	dir := t.TempDir()
	pidFile, signed := filepath.Join(dir, "pid"), filepath.Join(dir, "signed")
	prog := program(t, "echo $$ > "+pidFile+".new && mv "+pidFile+".new "+pidFile+"\nsleep 2\ntouch "+signed)
	caddy := exec.Command(os.Args[0])
	caddy.Env = append(os.Environ(), helperProgram+"="+prog)
	if err := caddy.Start(); err != nil {
		t.Fatal(err)
	}
	pid := proctest.PidFrom(t, pidFile)
	if err := caddy.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = caddy.Wait()
	if !proctest.Gone(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the program %d outlived Caddy", pid)
	}
	time.Sleep(3 * time.Second) // past when it would have signed
	if _, err := os.Stat(signed); err == nil {
		t.Error("the program went on to sign after Caddy was killed")
	}
}
