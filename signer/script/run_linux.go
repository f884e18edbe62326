package script

import "syscall"

// sysProcAttr puts the program in a process group of its own, and has the
// kernel kill it when Caddy dies (killed, out of memory): a program left
// running would go on past its timeout to sign a certificate nobody
// receives, and the resumed job would run it again. The parent-death
// signal reaches the program only, not what it started: those are killed
// with its group when a run ends, which a dead Caddy cannot do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
