//go:build unix

package store

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is the device and inode of the file fi describes.
func fileID(fi os.FileInfo) (string, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("dev %d inode %d", st.Dev, st.Ino), true
}
