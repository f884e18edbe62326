//go:build unix

package execpath

import (
	"fmt"
	"os"
	"syscall"
)

// xOK is access(2)'s X_OK.
const xOK = 0x1

// mayExecute says whether this process may execute path, as execve
// will decide: an execute bit for another user or group than Caddy's
// (a root-owned 0750 script, Caddy running as caddy), or a file system
// mounted noexec, would otherwise pass the load and fail every run.
func mayExecute(path string) error {
	if err := syscall.Access(path, xOK); err != nil {
		return fmt.Errorf("%s may not be executed by the user Caddy runs as (uid %d; check its mode, owner and mount): %w", path, os.Geteuid(), err)
	}
	return nil
}
