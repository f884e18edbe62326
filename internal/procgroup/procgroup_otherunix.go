//go:build unix && !linux

package procgroup

import "syscall"

// Attr puts the program in a process group of its own. Only Linux has the
// kernel kill it when Caddy dies: parentDeath is not honoured here.
func Attr(parentDeath bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
