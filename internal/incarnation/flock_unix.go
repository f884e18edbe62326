//go:build unix

package incarnation

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lock takes f's exclusive flock: a lock of the open file, which the
// kernel drops when the process exits, however it exits. (Not fcntl's
// record locks: those are a process's, which another descriptor of the
// same process would not be refused.)
func lock(f *os.File) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("incarnation: locking %s: %w", f.Name(), err)
	}
	return nil
}

// tryLock takes f's exclusive flock if no one holds it.
func tryLock(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("incarnation: locking %s: %w", f.Name(), err)
	}
	return true, nil
}
