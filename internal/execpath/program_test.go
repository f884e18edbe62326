package execpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/internal/proctest"
)

func TestOnlyAnAbsolutePathToAnExecutableFilePasses(t *testing.T) {
	dir := t.TempDir()
	exec, notExec := filepath.Join(dir, "run.sh"), filepath.Join(dir, "plain.sh")
	if err := os.WriteFile(exec, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string // want "": passes
	}{
		{"ok/an executable file", exec, ""},
		{"fail/a relative path", "bin/run.sh", `"bin/run.sh" must be an absolute path`},
		{"fail/a name looked up in PATH", "sh", `"sh" must be an absolute path`},
		{"fail/an empty path", "", `"" must be an absolute path`},
		{"fail/a missing file", filepath.Join(dir, "missing.sh"), "no such file or directory"},
		{"fail/a file nobody may execute", notExec, notExec + " is not an executable file"},
		{"fail/a directory", dir, dir + " is not an executable file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.path)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check: %v; want %q", err, tt.want)
			}
		})
	}
}

// A file with an execute bit for others only (a root-owned 0750 script,
// Caddy running as its own user) is one execve refuses: the load fails,
// rather than every run of the program.
func TestAFileThisProcessMayNotExecuteFailsTheCheck(t *testing.T) {
	if proctest.RunUnprivileged(t) {
		return
	}
	p := filepath.Join(t.TempDir(), "sign.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o611); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode passes through the umask.
	if err := os.Chmod(p, 0o611); err != nil {
		t.Fatal(err)
	}
	err := Check(p)
	if want := p + " may not be executed by the user Caddy runs as"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Check of a file whose owner may not execute it: %v; want %q", err, want)
	}
}
