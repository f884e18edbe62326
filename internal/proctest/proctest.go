// Package proctest tells tests whether a process they saw started is
// gone: what a test of a program runner (the script signer, a notify
// script) asserts after a timeout or a kill. It reads Linux's /proc.
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Gone waits, up to 5 s, for process pid to be dead: no longer there, or
// a zombie waiting for its new parent to reap it.
func Gone(pid int) bool {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		// pid (comm) STATE ...
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true
		}
	}
	return false
}

// PidFrom waits, up to 10 s, for a program under test to have written
// its pid to file (written whole: to file.new, then renamed), and
// returns it; the test fails when it does not.
func PidFrom(t testing.TB, file string) int {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("the program did not write its pid to %s", file)
	return 0
}

// Kill kills process pid (SIGKILL on Unix): a test's cleanup of a process
// its program under test should have ended, or a crash it causes.
func Kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
