//go:build unix

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockHolder returns the id of a process holding a lock on the bytes
// [start, start+n) of file (see SQLiteInUse), 0 when none does, -1 when
// one does but the system names no process (an open file description
// lock). getLock is the query: on Linux one that sees this process's own
// locks too. (Closing the file it opened drops this process's own POSIX
// locks on it: the check is for a process that does not have the store
// open itself, as migrate-store.)
func lockHolder(file string, start, n int64) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: start, Len: n}
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
