//go:build unix

package pgtest

import (
	"os/exec"
	"syscall"
)

// suspend stops each process with SIGSTOP; the returned function
// continues them. A process gone meanwhile needs nothing.
func suspend(pids []int) (resume func(), err error) {
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	signal(syscall.SIGSTOP)
	return func() { signal(syscall.SIGCONT) }, nil
}

// detach starts cmd in a session of its own, so that it outlives this
// binary's process group.
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }
