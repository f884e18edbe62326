// Package proctest tells tests whether a process they saw started is
// gone: what a test of a program runner (the script signer, a notify
// script) asserts after a timeout or a kill. It reads Linux's /proc.
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
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
