package procgroup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The packages that run an operator's program are where a Unix-only call
// (a process group, a signal) would slip in and stop the plugin from
// building on Windows, where Caddy runs too. They are built for Windows
// here: only procgroup may know the difference.
func TestTheProgramRunnersBuildForWindows(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, which runs these tests: %v", err)
	}
	cmd := exec.Command(goBin, "build", "-o", os.DevNull,
		"github.com/acmeproxy/caddy-acme-proxy/internal/procgroup",
		"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify",
		"github.com/acmeproxy/caddy-acme-proxy/signer/script")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build: %v\n%s", err, out)
	}
}
