//go:build unix && !linux

package store

import "golang.org/x/sys/unix"

// getLock is the plain lock query: it does not report this process's own
// locks, only another process's.
const getLock = unix.F_GETLK
