package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/procgroup"
	"github.com/acmeproxy/caddy-acme-proxy/internal/scriptout"
)

// maxStderr caps what is kept of a script's stderr, of which the operator
// is shown the first line.
const maxStderr = 64 << 10

// script runs the destination's program, without a shell, in a clean
// environment, the root directory and a process group of its own, with the event's JSON on
// stdin. Exit 0 is delivered; a program that is missing or cannot be
// executed is a permanent failure; any other failure (an exit status,
// the timeout) is retried. At the timeout the whole group is killed, and
// once the program exited whatever it left running in its group is too:
// a hanging delivery is retried, and each attempt must not leave a
// process behind. On Linux the program is killed too when Caddy dies
// (procgroup.Start): no delivery runs on unattended, past its timeout.
//
// A failure says, after how the script ended, the first line it wrote on
// stderr, as the script signer's does, with the destination's arguments
// of scriptout.MinRedacted bytes or more taken out ("[redacted arg 1]"):
// the error is stored as the job's last error, which operators list, and
// an argument may be a token (Describe leaves them out for that reason).
func (d *Deliverer) script(ctx context.Context, dst Destination, body []byte) error {
	cmd := exec.CommandContext(ctx, dst.Command, dst.Args...)
	cmd.Env = d.opts.ScriptEnv
	cmd.Dir = "/" // as the script signer: not wherever Caddy was started
	cmd.Stdin = bytes.NewReader(body)
	stderr := &scriptout.Capped{Max: maxStderr}
	cmd.Stderr = stderr
	cmd.Cancel = func() error { procgroup.KillGroup(cmd.Process.Pid); return nil }
	// Wait waits this long for the stderr pipe after the script exited:
	// something it started may hold the pipe open.
	cmd.WaitDelay = time.Second
	exited, err := procgroup.Start(cmd)
	if err == nil {
		err = <-exited
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the script exited 0; what holds its stderr is killed below
	}
	if cmd.Process != nil {
		procgroup.KillGroup(cmd.Process.Pid) // the group outlives its leader
	}
	if err == nil {
		return nil
	}
	// Wait has returned: nothing writes to stderr's buffer any more.
	said := ""
	if l := scriptout.FirstLine(argRedactor(dst.Args).Redact(stderr.Buf, stderr.Over)); l != "" {
		said = ": " + l
	}
	if ctx.Err() != nil {
		return fmt.Errorf("timed out after %s%s", d.opts.Timeout, said)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return fmt.Errorf("exited with status %d%s", ee.ExitCode(), said)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrPermission):
		return permanent(err)
	}
	return err
}

// argRedactor takes a script's arguments out of its stderr, each as
// "[redacted arg N]", N counted from 1.
func argRedactor(args []string) scriptout.Redactor {
	named := make(map[string]string, len(args))
	for i, a := range args {
		named["arg "+strconv.Itoa(i+1)] = a
	}
	return scriptout.NewRedactor(named)
}
