//go:build unix

package procgroup

import "syscall"

// KillGroup kills the process group led by pid (the program started with
// Attr), and with it whatever the program started and left running; a
// group already gone needs nothing.
func KillGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
