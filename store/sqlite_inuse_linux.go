package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockHolder returns the id of a process holding a lock on SQLite's
// WAL-index lock bytes of shm (see SQLiteInUse), 0 when none does. An
// open file description lock's query sees every conflicting lock, this
// process's own included (a plain F_GETLK does not report the caller's).
func lockHolder(shm string) (int, error) {
	f, err := os.Open(shm)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 120, Len: 9}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return 0, err
	}
	if lk.Type == unix.F_UNLCK {
		return 0, nil
	}
	if lk.Pid <= 0 {
		return -1, nil // an open file description lock: no process named
	}
	return int(lk.Pid), nil
}
