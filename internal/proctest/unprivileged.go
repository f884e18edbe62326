package proctest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unprivilegedEnv marks the child RunUnprivileged starts, so that the
// test it runs there does not try to start another.
const unprivilegedEnv = "ACMEPROXY_TEST_UNPRIVILEGED"

// nobody is the user and group ids the child runs as (Debian's nobody
// and nogroup).
const nobody = "65534"

// RunUnprivileged lets a test whose case rests on permission bits run
// where root, which they do not stop, runs it — CI runs the tests as
// root. When this process is not root it returns false and the test goes
// on. As root it runs the test again, alone, in a copy of the test
// binary started as nobody through util-linux's setpriv, fails t unless
// the copy reports the test passed, and returns true: the caller returns.
// Without setpriv it skips t, and fails it under ACMEPROXY_E2E=1.
func RunUnprivileged(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	if os.Getenv(unprivilegedEnv) == "1" {
		t.Fatal("proctest: still root in the unprivileged copy of the test")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		if os.Getenv("ACMEPROXY_E2E") == "1" {
			t.Fatal("proctest: setpriv is not on PATH; ACMEPROXY_E2E=1 requires it to run this test as nobody (apt-get install util-linux)")
		}
		t.Skip("proctest: running as root, which permission bits do not stop, and setpriv (util-linux) is not on PATH to run the test as nobody")
	}
	// The test binary sits in go's build directory, which only root may
	// read; the copy, and the temporary directory the child's tests use,
	// are in one nobody may reach (t.TempDir's parent is root's alone).
	dir, err := os.MkdirTemp("", "unprivileged")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, tmp} {
		if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "test.bin")
	copyExecutable(t, os.Args[0], bin)

	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(setpriv, "--reuid="+nobody, "--regid="+nobody, "--clear-groups", "--",
		bin, "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.v")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), unprivilegedEnv+"=1", "TMPDIR="+tmp, "HOME="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("proctest: the test run as nobody did not pass (%v):\n%s", err, out)
	}
	return true
}

// copyExecutable copies the file from to a new file to that anyone may
// read and run.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
