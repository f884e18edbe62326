// Package procgroup runs an operator's program (a script signer, a notify
// script) in a process group of its own where the system has them, so
// that a timeout or the end of a run kills what the program started too,
// not only the program. On systems without process groups (Windows) only
// the program itself is killed; the plugin still builds and runs there.
package procgroup

import (
	"os/exec"
	"runtime"
)

// Start starts cmd in a process group of its own and, on Linux, tied to
// this process's life: the kernel kills the program (SIGKILL) when Caddy
// dies — killed, out of memory — instead of letting it run on
// unattended. It sets cmd.SysProcAttr. exited receives cmd.Wait's result
// once the program has exited; err is cmd.Start's, and then nothing is
// sent on exited. The parent-death signal reaches the program only, not
// what it started.
//
// Linux's parent-death signal fires when the thread that started the
// program ends, not the process; and the runtime ends a thread when a
// goroutine locked to it returns. So the program is started and waited
// for by a goroutine that holds its thread the whole time: no other
// goroutine runs on that thread, which then ends only with the process
// or after the program has exited. (Wait blocks a thread anyway.)
func Start(cmd *exec.Cmd) (exited <-chan error, err error) {
	cmd.SysProcAttr = attr()
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
