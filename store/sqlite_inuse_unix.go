//go:build unix && !linux

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockHolder returns the id of another process holding a lock on
// SQLite's WAL-index lock bytes of shm (see SQLiteInUse), 0 when none
// does. (F_GETLK does not report this process's own locks.)
func lockHolder(shm string) (int, error) {
	f, err := os.Open(shm)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 120, Len: 9}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		return 0, err
	}
	if lk.Type == unix.F_UNLCK {
		return 0, nil
	}
	return int(lk.Pid), nil
}
