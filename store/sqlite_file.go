package store

import (
	"errors"
	"fmt"
	"os"
)

// SQLiteFileKey returns a key naming the SQLite file at path itself
// rather than this one of its names: on Unix its device and inode, so that
// every name of one file — a symlink, a hard link, a bind mount — gives
// one key, and one process opens one store on it; elsewhere path. A file
// that does not exist yet has no such key: exists is false, and nothing
// is created (the store creates the file when it is opened).
func SQLiteFileKey(path string) (key string, exists bool, err error) {
	if path == "" {
		return "", false, errors.New("store: sqlite path is empty")
	}
	fi, err := os.Stat(path)
	if missing(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: %w", err)
	}
	if id, ok := fileID(fi); ok {
		return id, true, nil
	}
	return path, true, nil
}
