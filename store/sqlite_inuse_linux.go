package store

import "golang.org/x/sys/unix"

// getLock asks about an open file description lock: its answer sees
// every conflicting lock, this process's own included (a plain F_GETLK
// does not report the caller's), which is what makes the check testable
// within one process.
const getLock = unix.F_OFD_GETLK
