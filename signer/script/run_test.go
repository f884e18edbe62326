package script

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
)

// program writes an executable /bin/sh script into a temporary directory
// and returns its path. The scripts are the test's programs; the runner
// itself never uses a shell.
func program(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheProgramSeesOnlyPATHItsConfiguredVariablesAndTheRequestsOwn(t *testing.T) {
	t.Setenv("CADDY_SECRET_THAT_MUST_NOT_LEAK", "hunter2")
	s, err := New(Options{Command: []string{"/usr/bin/env"}, Env: map[string]string{"CA_DIR": "/srv/ca", "MODE": "a b"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := execute(context.Background(), run{Argv: s.opts.Command,
		Env:   s.environ("issue", "ord1", "prof", []acme.Identifier{{Type: "dns", Value: "a.example.com"}, {Type: "ip", Value: "10.0.0.1"}}),
		Stdin: nil, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	slices.Sort(got)
	want := []string{
		"ACME_PROXY_IDENTIFIERS=a.example.com,10.0.0.1",
		"ACME_PROXY_OPERATION=issue",
		"ACME_PROXY_ORDER_ID=ord1",
		"ACME_PROXY_PROFILE=prof",
		"CA_DIR=/srv/ca",
		"MODE=a b",
		"PATH=" + os.Getenv("PATH"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("the program's environment:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTheProgramReadsTheRequestAndThenEndOfInput(t *testing.T) {
	// cat ends only when its input is closed.
	in := bytes.Repeat([]byte(`{"version":1}`), 20000) // past a pipe's buffer
	res, err := execute(context.Background(), run{Argv: []string{"/bin/cat"}, Stdin: in, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut || res.Exit != 0 || !bytes.Equal(res.Stdout, in) {
		t.Errorf("cat: %s, %d bytes out; want exit 0 echoing the %d bytes of input", res.describe(), len(res.Stdout), len(in))
	}
}

func TestHowTheProgramEndsIsReported(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		exit     int
		signal   syscall.Signal
		describe string
	}{
		{"success", "exit 0", 0, 0, "exited with status 0"},
		{"refused, with the first stderr line", "echo >&2; echo '  no such name  ' >&2; echo second >&2; exit 2", 2, 0, "exited with status 2: no such name"},
		{"temporary failure", "exit 75", 75, 0, "exited with status 75"},
		{"killed by a signal", "kill -TERM $$", -1, syscall.SIGTERM, "was killed by signal terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := execute(context.Background(), run{Argv: []string{program(t, tt.body)}, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.Exit != tt.exit || res.Signal != tt.signal || res.describe() != tt.describe {
				t.Errorf("exit %d, signal %v, %q; want %d, %v, %q", res.Exit, res.Signal, res.describe(), tt.exit, tt.signal, tt.describe)
			}
		})
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the program wrote no pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestAtTheTimeoutTheProgramAndEverythingItStartedAreKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The grandchild holds stdout open and sleeps forever.
	prog := program(t, "sleep 1000 & echo $! > "+pidFile+"\nsleep 1000")
	start := time.Now()
	res, err := execute(context.Background(), run{Argv: []string{prog}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the run took %s; want about the 300ms timeout", took)
	}
	if !res.TimedOut || res.describe() != "timed out and was killed" {
		t.Errorf("%+v; want timed out", res)
	}
	if pid := readPid(t, pidFile); !proctest.Gone(pid) {
		proctest.Kill(pid)
		t.Errorf("the sleeping grandchild %d outlived the timeout", pid)
	}
}

func TestAProgramThatExitsLeavesNothingRunningBehind(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	prog := program(t, "sleep 1000 & echo $! > "+pidFile+"\necho done")
	start := time.Now()
	res, err := execute(context.Background(), run{Argv: []string{prog}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the run took %s, waiting on the background child; want it over when the program exits", took)
	}
	if res.TimedOut || res.Exit != 0 || string(res.Stdout) != "done\n" {
		t.Errorf("%s, stdout %q; want exit 0 and done", res.describe(), res.Stdout)
	}
	if pid := readPid(t, pidFile); !proctest.Gone(pid) {
		proctest.Kill(pid)
		t.Errorf("the background child %d outlived the program", pid)
	}
}

func TestOutputPastTheCapsIsCutAndNoted(t *testing.T) {
	prog := program(t, "head -c 3000000 /dev/zero; head -c 200000 /dev/zero >&2")
	res, err := execute(context.Background(), run{Argv: []string{prog}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.StdoutCapped || len(res.Stdout) != MaxStdout || !res.StderrCapped || len(res.Stderr) != MaxStderr {
		t.Errorf("stdout %d bytes (capped %v), stderr %d (capped %v); want %d and %d, both capped",
			len(res.Stdout), res.StdoutCapped, len(res.Stderr), res.StderrCapped, MaxStdout, MaxStderr)
	}
	small, err := execute(context.Background(), run{Argv: []string{program(t, "head -c 1000 /dev/zero")}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if small.StdoutCapped || len(small.Stdout) != 1000 {
		t.Errorf("1000 bytes of output: %d kept, capped %v; want all, not capped", len(small.Stdout), small.StdoutCapped)
	}
}
