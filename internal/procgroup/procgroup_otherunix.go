//go:build unix && !linux

package procgroup

import "syscall"

// attr puts the program in a process group of its own. Only Linux has the
// kernel kill it when Caddy dies.
func attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
