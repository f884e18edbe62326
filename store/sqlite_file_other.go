//go:build !unix

package store

import "os"

// fileID has no identity to give here: SQLiteFileKey keys by path.
func fileID(os.FileInfo) (string, bool) { return "", false }
