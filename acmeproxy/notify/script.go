package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/procgroup"
)

// script runs the destination's program, without a shell, in a clean
// environment, the root directory and a process group of its own, with the event's JSON on
// stdin. Exit 0 is delivered; a program that is missing or cannot be
// executed is a permanent failure; any other failure (an exit status,
// the timeout) is retried. At the timeout the whole group is killed, and
// once the program exited whatever it left running in its group is too:
// a hanging delivery is retried, and each attempt must not leave a
// process behind. On Linux the program is killed too when Caddy dies
// (procgroup.Start): no delivery runs on unattended, past its timeout.
func (d *Deliverer) script(ctx context.Context, dst Destination, body []byte) error {
	cmd := exec.CommandContext(ctx, dst.Command, dst.Args...)
	cmd.Env = d.opts.ScriptEnv
	cmd.Dir = "/" // as the script signer: not wherever Caddy was started
	cmd.Stdin = bytes.NewReader(body)
	cmd.Cancel = func() error { procgroup.KillGroup(cmd.Process.Pid); return nil }
	cmd.WaitDelay = time.Second
	exited, err := procgroup.Start(cmd)
	if err == nil {
		err = <-exited
	}
	if cmd.Process != nil {
		procgroup.KillGroup(cmd.Process.Pid) // the group outlives its leader
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("timed out after %s", d.opts.Timeout)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return fmt.Errorf("exited with status %d", ee.ExitCode())
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrPermission):
		return permanent(err)
	}
	return err
}
