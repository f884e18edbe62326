//go:build unix

// Package proccpu reads the CPU time this process has used, for the
// benchmarks that report CPU per operation (cpu-ns/op, proc-CPU-ms/cert):
// unlike wall time it hardly moves when other processes load the machine.
package proccpu

import (
	"syscall"
	"time"
)

// Used is the CPU time, user and system, this process has used so far; 0
// when the system does not say.
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
