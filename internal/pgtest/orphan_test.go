//go:build unix

package pgtest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanChildEnv makes this test binary the child of
// TestAClusterIsStoppedWhenItsTestBinaryDiesWithoutShutdown.
const orphanChildEnv = "PGTEST_ORPHAN_CHILD"

// A test binary that dies without reaching Main's Shutdown — go test's
// -timeout panics it, a test panics, a kill — leaves no PostgreSQL
// running: its cluster is stopped and its directory removed soon after.
func TestAClusterIsStoppedWhenItsTestBinaryDiesWithoutShutdown(t *testing.T) {
	if os.Getenv(orphanChildEnv) == "1" {
		// The child: start the cluster, say where it is, and wait to be
		// killed.
		if _, err := ProcessDSN(); err != nil {
			t.Fatal(err)
		}
		pid, err := cl.postmaster()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("cluster " + cl.dir + " " + strconv.Itoa(pid) + "\n")
		time.Sleep(time.Minute)
		return
	}
	if _, err := binDir(); err != nil {
		if os.Getenv("ACMEPROXY_E2E") == "1" {
			t.Fatalf("pgtest: %v; ACMEPROXY_E2E=1 requires PostgreSQL", err)
		}
		t.Skipf("pgtest: %v (install PostgreSQL to run this test; under ACMEPROXY_E2E=1 this fails)", err)
	}
	child := exec.Command(os.Args[0], "-test.run", "^TestAClusterIsStoppedWhenItsTestBinaryDiesWithoutShutdown$", "-test.v")
	child.Env = append(os.Environ(), orphanChildEnv+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	var pid int
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "cluster" {
			dir = f[1]
			pid, _ = strconv.Atoi(f[2])
			break
		}
	}
	if dir == "" {
		child.Process.Kill()
		child.Wait()
		t.Fatal("the child never started its cluster")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the child's postmaster (pid %d) is not running: %v", pid, err)
	}
	child.Process.Kill()
	child.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, dirErr := os.Stat(filepath.Join(dir, "data"))
		alive := syscall.Kill(pid, 0) == nil
		if !alive && os.IsNotExist(dirErr) {
			return
		}
		if time.Now().After(deadline) {
			if alive {
				syscall.Kill(pid, syscall.SIGQUIT) // not left behind by this test either
			}
			t.Fatalf("20 s after its test binary was killed, the postmaster runs: %v, its directory is there: %v", alive, dirErr == nil)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
