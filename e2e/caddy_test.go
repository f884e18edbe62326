//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/freeport"
)

// caddyPkg is what buildCaddy builds.
const caddyPkg = "github.com/acmeproxy/caddy-acme-proxy/cmd/caddy"

// needTool returns the path of the program name on PATH. When it is
// missing the test skips, or fails when ACMEPROXY_E2E=1 says the
// environment must have it; hint says how to get it.
func needTool(t *testing.T, name, hint string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s is not on PATH (%v); %s", name, err, hint)
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatalf("%s; ACMEPROXY_E2E=1 requires it", msg)
	}
	t.Skipf("skipping: %s (with ACMEPROXY_E2E=1 this fails instead)", msg)
	return ""
}

// buildCaddy builds cmd/caddy into a temporary directory and returns the
// binary's path.
func buildCaddy(t *testing.T) string {
	t.Helper()
	goBin := needTool(t, "go", "the e2e tests build cmd/caddy with the go command")
	bin := filepath.Join(t.TempDir(), "caddy")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, caddyPkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", caddyPkg, err, out)
	}
	t.Logf("built %s in %s", caddyPkg, time.Since(start).Round(time.Millisecond))
	return bin
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// below the ephemeral range (see internal/freeport).
func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return port
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reading
// test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// inOwnGroup puts cmd in a process group of its own, killed as a whole
// when cmd's context ends, so that nothing it starts outlives the test.
func inOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}

// caddyProc is a running caddy.
type caddyProc struct {
	pid    int           // its process (and process group) id
	out    *syncBuffer   // stdout and stderr
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's answer, once exited is closed
	cancel context.CancelFunc
}

// stop kills caddy's process group and waits for it to exit.
func (p *caddyProc) stop() {
	p.cancel()
	<-p.exited
}

// startCaddy runs `caddy run` on the Caddyfile config with env added to
// the test's environment. On cleanup it kills caddy's process group, and
// if the test failed it logs what caddy wrote.
func startCaddy(t *testing.T, bin, config string, env []string) *caddyProc {
	t.Helper()
	file := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return startCaddyIn(t, bin, "", file, env)
}

// startCaddyIn is startCaddy for a Caddyfile already on disk, file being
// read relative to the working directory dir ("": the test's).
func startCaddyIn(t *testing.T, bin, dir, file string, env []string) *caddyProc {
	t.Helper()
	config, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "run", "--adapter", "caddyfile", "--config", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	inOwnGroup(cmd)
	p := &caddyProc{out: new(syncBuffer), exited: make(chan struct{}), cancel: cancel}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start caddy: %v", err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.exited
		if t.Failed() {
			t.Logf("caddy config:\n%s\ncaddy output:\n%s", config, p.out)
		}
	})
	return p
}

// waitDirectory polls url until it answers 200 over TLS verified against
// the root certificate in rootFile (which caddy writes when its PKI app
// starts), and returns that root.
func waitDirectory(t *testing.T, p *caddyProc, url, rootFile string, timeout time.Duration) *x509.Certificate {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		select {
		case <-p.exited:
			t.Fatalf("caddy exited before %s answered: %v", url, p.err)
		default:
		}
		root, err := tryDirectory(url, rootFile)
		if err == nil {
			return root
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within %s: %v", url, timeout, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tryDirectory(url, rootFile string) (*x509.Certificate, error) {
	roots, err := readCerts(rootFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(roots[0])
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return roots[0], nil
}

// readCerts reads the PEM certificates of file, in order; there must be
// at least one.
func readCerts(file string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: unexpected PEM block %q", file, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New(file + ": no certificate")
	}
	return certs, nil
}
