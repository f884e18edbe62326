//go:build !unix

package procgroup

import (
	"os"
	"syscall"
)

// attr is nil: this system has no process groups the package can kill,
// nor a parent-death signal.
func attr() *syscall.SysProcAttr { return nil }

// KillGroup kills the program pid only: what it started runs on.
func KillGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
