package execpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
