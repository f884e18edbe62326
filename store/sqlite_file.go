package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SQLiteFileKey creates the SQLite file at path when it does not exist
// yet, as OpenSQLite would (its directory 0700, the file 0600, before
// SQLite opens it), and returns a key naming the file itself rather than
// this one of its names: on Unix its device and inode, so that every name
// of one file — a symlink, a hard link, a bind mount — gives one key, and
// one process opens one store on it; elsewhere path. The file is created
// first because a key for a file that does not exist yet could not be
// the key of the file a second name, linked to it later, reaches.
func SQLiteFileKey(path string) (string, error) {
	if path == "" {
		return "", errors.New("store: sqlite path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("store: creating directory for %s: %w", path, err)
	}
	var fi os.FileInfo
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		fi, err = f.Stat()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	case errors.Is(err, os.ErrExist):
		fi, err = os.Stat(path)
	}
	if err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	if id, ok := fileID(fi); ok {
		return id, nil
	}
	return path, nil
}
