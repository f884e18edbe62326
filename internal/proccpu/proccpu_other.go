//go:build !unix

// Package proccpu reads the CPU time this process has used, for the
// benchmarks that report CPU per operation.
package proccpu

import "time"

// Used is not measured here: benchmarks report 0 CPU.
func Used() time.Duration { return 0 }
