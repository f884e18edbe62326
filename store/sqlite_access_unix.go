//go:build unix

package store

import "golang.org/x/sys/unix"

// writableDir reports whether this process (its effective ids, as it
// will create the file) may add entries to the directory dir.
func writableDir(dir string) error {
	return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
}
