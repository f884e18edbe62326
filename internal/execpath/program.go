// Package execpath checks, when a config loads, a program the proxy runs
// later without a shell (the script signer's command, a notify script),
// so that a path that cannot run fails the load, not the first run.
package execpath

import (
	"fmt"
	"os"
	"path/filepath"
)

// Check requires path to be an absolute path to a regular file that
// this process may execute. Its errors quote the path and leave the key to the
// caller: a missing file is the *fs.PathError of os.Stat.
func Check(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q must be an absolute path", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return mayExecute(path)
}
