package procgroup

import "syscall"

// Attr puts the program in a process group of its own. With parentDeath,
// the kernel also kills the program when the thread that started it ends
// (Linux's parent-death signal): the caller must start and wait for the
// program from a goroutine locked to its thread, which then ends only
// with the process — so a program is killed when Caddy dies (killed, out
// of memory) instead of running on unattended. The signal reaches the
// program only, not what it started.
func Attr(parentDeath bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if parentDeath {
		a.Pdeathsig = syscall.SIGKILL
	}
	return a
}
