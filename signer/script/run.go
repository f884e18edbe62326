package script

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/procgroup"
	"github.com/acmeproxy/caddy-acme-proxy/internal/scriptout"
)

// Output caps: what the program writes past them is discarded and the
// run counts as failed, so a runaway program cannot fill the memory.
const (
	MaxStdout = 1 << 20  // 1 MiB: a PEM chain is a few KiB
	MaxStderr = 64 << 10 // 64 KiB: enough for any diagnostic
)

// pipeGrace bounds how long the output is read after the program's group
// was killed: a process that left the group (setsid) may keep the pipes
// open, and is not waited for.
const pipeGrace = 2 * time.Second

// run is one execution of the program.
type run struct {
	Argv    []string
	Env     []string // the whole environment; nothing is inherited
	Stdin   []byte
	Timeout time.Duration
	// Redact takes the configured values out of what the program writes
	// on stderr, the output that is stored and logged.
	Redact scriptout.Redactor
}

// result is what one execution did.
type result struct {
	Stdout, Stderr []byte
	// StdoutCapped and StderrCapped report output past the caps.
	StdoutCapped, StderrCapped bool
	// Exit is the exit status; -1 when the program did not exit by itself.
	Exit int
	// Signal is the signal that ended the program, if one did.
	Signal syscall.Signal
	// TimedOut: the timeout passed and the program's group was killed.
	TimedOut bool
	// Interrupted: ctx ended first and the group was killed.
	Interrupted bool
}

// firstStderrLine is the first non-empty line the program wrote on
// stderr, trimmed, at most 200 bytes.
func (r result) firstStderrLine() string { return scriptout.FirstLine(r.Stderr) }

// describe says how the program ended, for the operator.
func (r result) describe() string {
	var what string
	switch {
	case r.TimedOut:
		what = "timed out and was killed"
	case r.Interrupted:
		what = "was interrupted"
	case r.Signal != 0:
		what = "was killed by signal " + r.Signal.String()
	default:
		what = fmt.Sprintf("exited with status %d", r.Exit)
	}
	if l := r.firstStderrLine(); l != "" {
		what += ": " + l
	}
	return what
}

// execute runs the program in a process group of its own, with exactly
// r.Env as its environment, r.Stdin written to it and then closed. At the
// timeout, or when ctx ends, the whole group is killed; it is killed too
// once the program exits, so nothing it started outlives it. Where the
// platform allows (procgroup.Start), the program is killed too when this
// process dies. An error is returned only when the program could not be
// started.
func execute(ctx context.Context, r run) (result, error) {
	if len(r.Argv) == 0 {
		return result{}, errors.New("script: no command")
	}
	cmd := exec.Command(r.Argv[0], r.Argv[1:]...)
	cmd.Env = r.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = "/"

	// Own pipes, not exec's: Wait must not wait for a grandchild that
	// holds them open, and their reading is bounded after the kill.
	inR, inW, err := os.Pipe()
	if err != nil {
		return result{}, fmt.Errorf("script: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return result{}, fmt.Errorf("script: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return result{}, fmt.Errorf("script: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	exited, startErr := procgroup.Start(cmd)
	// The child has its copies; the parent keeps only its ends.
	inR.Close()
	outW.Close()
	errW.Close()
	if startErr != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return result{}, fmt.Errorf("script: starting %s: %w", r.Argv[0], startErr)
	}
	pgid := cmd.Process.Pid

	go func() {
		// A program that does not read its input gets EPIPE here, not
		// a blocked writer.
		_, _ = inW.Write(r.Stdin)
		inW.Close()
	}()
	var (
		res     result
		readers sync.WaitGroup
	)
	stdout := &scriptout.Capped{Max: MaxStdout}
	stderr := &scriptout.Capped{Max: MaxStderr}
	for _, p := range []struct {
		f *os.File
		w *scriptout.Capped
	}{{outR, stdout}, {errR, stderr}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			_, _ = io.Copy(p.w, p.f)
		}()
	}

	timer := time.NewTimer(r.Timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		res.TimedOut = true
		kill(cmd.Process)
		<-exited
	case <-ctx.Done():
		res.Interrupted = true
		kill(cmd.Process)
		<-exited
	}
	// Whatever the program left behind in its group goes with it.
	procgroup.KillGroup(pgid)

	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(pipeGrace):
		outR.Close()
		errR.Close()
		<-done
	}
	outR.Close()
	errR.Close()

	res.Stdout, res.StdoutCapped = stdout.Buf, stdout.Over
	res.Stderr, res.StderrCapped = r.Redact.Redact(stderr.Buf, stderr.Over), stderr.Over
	res.Exit = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal()
	}
	return res, nil
}

// kill kills the program's process group, and the program itself should
// the group be gone already.
func kill(p *os.Process) {
	procgroup.KillGroup(p.Pid)
	_ = p.Kill()
}
