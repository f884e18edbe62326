//go:build unix

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// Caddy as its own process (ACMEPROXY_BENCH_PROCESS=1): the benchmark's
// test binary starts itself again as `caddy run` on the benchmark's
// Caddyfile, so the server's whole CPU — every goroutine, the GC, the
// kernel's share — is that process's, read from /proc/<pid>/stat, apart
// from the load generator's. It is the same Caddy with the same modules
// (this binary links them), and the child points its default resolver at
// the benchmark's DNS server as the in-process fixture does.

// childEnv, set in the child's environment, names its Caddyfile.
const (
	childEnv    = "ACMEPROXY_BENCH_CHILD_CADDYFILE"
	childDNSEnv = "ACMEPROXY_BENCH_CHILD_DNS"
)

// runChildCaddy is the child: Caddy's own command line, `caddy run`.
func runChildCaddy() int {
	if addr := os.Getenv(childDNSEnv); addr != "" {
		r := net.DefaultResolver
		var d net.Dialer
		r.PreferGo = true
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}
	}
	os.Args = []string{"caddy", "run", "--config", os.Getenv(childEnv), "--adapter", "caddyfile"}
	caddycmd.Main()
	return 0
}

// caddyProcess is the running child.
type caddyProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // once done
}

// startCaddyProcess starts Caddy on cfgFile, with its Caddyfile and log in
// dir; env is added to the child's environment.
func startCaddyProcess(dir, cfgFile, dnsAddr string, env ...string) (*caddyProcess, error) {
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfgFile), 0o600); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), childEnv+"="+path, childDNSEnv+"="+dnsAddr), env...)
	logFile, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if os.Getenv("ACMEPROXY_BENCH_LOG") == "stderr" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting Caddy as its own process: %w", err)
	}
	p := &caddyProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited returns an error once the child has ended.
func (p *caddyProcess) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("Caddy exited at start (%v); see caddy.log in the benchmark's directory", p.err)
	default:
		return nil
	}
}

// stop ends the child as an operator would (SIGINT: Caddy stops its apps
// and exits), killing it if it has not exited after ten seconds.
func (p *caddyProcess) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on every
// architecture Linux exports to user space with a fixed value.
const userHZ = 100

// cpu is the child's user+system CPU so far, from /proc/<pid>/stat.
func (p *caddyProcess) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// the fields after its closing parenthesis start at field 3 (state).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc/<pid>/stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("/proc/<pid>/stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// peakRSS is the child's peak resident set size (VmHWM) since it started
// or since resetPeakRSS.
func (p *caddyProcess) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/<pid>/status")
}

// resetPeakRSS starts the peak RSS over (clear_refs 5), so that each
// sub-benchmark reports its own; an error leaves the peak since start.
func (p *caddyProcess) resetPeakRSS() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0)
}
