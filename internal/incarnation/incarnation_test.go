//go:build unix

package incarnation

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child process of the test binary, run by startChild: it registers in
// the directory $INCARNATION_CHILD_DIR, says its id and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("INCARNATION_CHILD_DIR"); dir != "" {
		r := New(dir, time.Hour)
		if err := r.Register(); err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(r.Self() + "\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChild starts a process registered in dir and returns it with its id.
func startChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "INCARNATION_CHILD_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error ") {
		t.Fatalf("child: %q %v", line, err)
	}
	return cmd, strings.TrimSpace(line)
}

func TestAProcessIsSaidToHaveExitedOnlyOnceItHas(t *testing.T) {
	tests := []struct {
		name       string
		kill       func(t *testing.T, c *exec.Cmd)
		wantExited bool
	}{
		{name: "a process still running", kill: func(*testing.T, *exec.Cmd) {}},
		{name: "a process stopped (SIGSTOP) still runs", kill: func(t *testing.T, c *exec.Cmd) {
			if err := c.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a process killed with SIGKILL", wantExited: true, kill: func(t *testing.T, c *exec.Cmd) {
			if err := c.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			c.Wait()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			self := New(dir, time.Hour)
			if err := self.Register(); err != nil {
				t.Fatal(err)
			}
			child, id := startChild(t, dir)
			tc.kill(t, child)
			exited, err := self.Exited()
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(exited, id); got != tc.wantExited {
				t.Errorf("the child is among the exited: %v (%v); want %v", got, exited, tc.wantExited)
			}
			if slices.Contains(exited, self.Self()) {
				t.Errorf("this process is among the exited: %v", exited)
			}
			// Another registry of this process's: its lock is refused to
			// a second open file too.
			if other, err := New(dir, time.Hour).Exited(); err != nil || slices.Contains(other, self.Self()) {
				t.Errorf("a second registry says this process has exited: %v %v", other, err)
			}
		})
	}
}

func TestTheFileOfAnExitedProcessIsRemovedKeepAfterItWasFirstFoundExited(t *testing.T) {
	dir := t.TempDir()
	self := New(dir, 50*time.Millisecond)
	if err := self.Register(); err != nil {
		t.Fatal(err)
	}
	child, id := startChild(t, dir)
	child.Process.Kill()
	child.Wait()
	file := filepath.Join(dir, id+".lock")
	if exited, err := self.Exited(); err != nil || !slices.Contains(exited, id) {
		t.Fatalf("exited %v %v; want the child", exited, err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the file is gone as soon as the child was found exited: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := self.Exited(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the file is still there after keep: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, self.Self()+".lock")); err != nil {
		t.Errorf("this process's own file: %v", err)
	}
}

// A process that stops using the store (its last app cleaned up) ends its
// registration: its file is gone, so it is neither running nor exited to
// the others, and it claims nothing under that id any more.
func TestAClosedRegistrationLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	r := New(dir, time.Hour)
	if err := r.Register(); err != nil {
		t.Fatal(err)
	}
	id := r.Self()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, id+".lock")); !os.IsNotExist(err) {
		t.Errorf("the file is still there after Close: %v", err)
	}
	if got := r.Self(); got != "" {
		t.Errorf("Self after Close = %q, want none", got)
	}
	if exited, err := New(dir, time.Hour).Exited(); err != nil || len(exited) != 0 {
		t.Errorf("exited after Close: %v %v; want none", exited, err)
	}
}
