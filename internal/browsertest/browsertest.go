// Package browsertest finds the headless browser the operator page's
// tests drive: Debian's chromium. It is test support, in one place so
// that every browser test skips, or fails in CI, the same way.
package browsertest

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of chromium, or skips the test when it is
// missing — and fails it under ACMEPROXY_E2E=1, where .ci/run has
// installed it, so that CI never passes a browser test it did not run.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatal("chromium is not on PATH; ACMEPROXY_E2E=1 requires it (apt-get install chromium)")
	}
	t.Skip("chromium is not on PATH (apt-get install chromium)")
	return ""
}
