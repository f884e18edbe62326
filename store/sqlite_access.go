package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// creatable reports why Open could not create the SQLite file at path,
// for Check, which creates nothing: Open makes the directories missing
// above the file (as os.MkdirAll) and then the file, so the deepest of
// those that exists must be a directory this process may add entries to.
// An existing file passes (its schema is Check's other look). What the
// permissions cannot tell — a file system that refuses a write they
// allow — is still Open's to find.
func creatable(path string) error {
	_, err := os.Stat(path)
	if err == nil || !missing(err) {
		return nil // there (or unreadable: refuseNewerSchema says so)
	}
	for dir := filepath.Dir(path); ; {
		fi, err := os.Stat(dir)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("store: cannot create the SQLite file %s: %s is not a directory", path, dir)
		case err == nil:
			if err := writableDir(dir); err != nil {
				return fmt.Errorf("store: cannot create the SQLite file %s: cannot write in the directory %s: %w", path, dir, err)
			}
			return nil
		case !missing(err):
			return fmt.Errorf("store: cannot create the SQLite file %s: %w", path, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// missing reports whether a look at a path found nothing there: it does
// not exist, or a name above it is a file rather than a directory.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
