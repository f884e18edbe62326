//go:build unix

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockHolder returns the id of a process holding a lock on SQLite's
// WAL-index lock bytes of shm (see SQLiteInUse), 0 when none does, -1
// when one does but the system names no process (an open file
// description lock). getLock is the query: on Linux one that sees this
// process's own locks too.
func lockHolder(shm string) (int, error) {
	f, err := os.Open(shm)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 120, Len: 9}
	if err := unix.FcntlFlock(f.Fd(), getLock, &lk); err != nil {
		return 0, err
	}
	if lk.Type == unix.F_UNLCK {
		return 0, nil
	}
	if lk.Pid <= 0 {
		return -1, nil
	}
	return int(lk.Pid), nil
}
