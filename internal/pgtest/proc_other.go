//go:build !unix

package pgtest

import (
	"errors"
	"os/exec"
)

// suspend needs SIGSTOP, which only Unix has: on other systems the
// package builds (so do the tests that import it), and Freeze fails.
func suspend([]int) (resume func(), err error) {
	return nil, errors.New("stopping a process needs SIGSTOP (Unix only)")
}

// detach leaves cmd as it is: outside Unix the watcher's session of its
// own is not available.
func detach(*exec.Cmd) {}
