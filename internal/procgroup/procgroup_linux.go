package procgroup

import "syscall"

// attr puts the program in a process group of its own, and has the
// kernel kill the program when the thread that started it ends (Linux's
// parent-death signal): Start starts and waits for it from a goroutine
// locked to its thread, which then ends only with the process.
func attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
