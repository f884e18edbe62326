//go:build !linux

package script

import "syscall"

// sysProcAttr puts the program in a process group of its own. Only Linux
// has the kernel kill it when Caddy dies (see run_linux.go).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
