//go:build unix

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// twoInstances is the server name of acme_proxy as two Caddy processes
// on one PostgreSQL database, reached through a TCP round-robin.
const twoInstances = "two_instances"

// BenchmarkIssuanceTwoInstances is BenchmarkIssuance against two
// acme_proxy instances — two Caddy processes, each with its own data
// directory, on one PostgreSQL database of their own — behind a TCP
// round-robin (a listener of this process handing each connection it
// accepts to the next instance). Every client keeps two connections and
// alternates its requests between them, and the round-robin puts its two
// connections on different instances: each client's flows go back and
// forth between A and B, as they do behind a load balancer that does not
// pin clients. Both instances share Caddy's storage, for the local CA
// that signs (the database is all acme_proxy shares).
//
// Run it with ACMEPROXY_BENCH_PROCESS=1 to compare with one instance that
// is a process of its own too.
func BenchmarkIssuanceTwoInstances(b *testing.B) {
	h := getHarness(b)
	f := h.getFleet(b)
	for _, n := range clientCounts {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			b.Run("server="+twoInstances, func(b *testing.B) {
				before, cpuBefore := f.rr.snapshot(), f.cpu(b)
				h.run(b, twoInstances, n, false)
				b.ReportMetric(ms(f.cpu(b)-cpuBefore)/float64(b.N), "instances-CPU-ms/cert")
				f.rr.check(b, before, min(n, b.N))
			})
		})
	}
}

// fleetCaddyfile is one instance of the pair: %[1]d its admin port, %[2]s
// the shared Caddy storage, %[3]d/%[4]d its HTTP/HTTPS ports, %[5]s its
// log output, %[6]s the DSN, %[7]s the DNS server, %[8]d the http-01
// validation port.
const fleetCaddyfile = `{
	admin 127.0.0.1:%[1]d
	persist_config off
	storage file_system %[2]s
	skip_install_trust
	# Fresh storage: nothing to clean. Caddy's clean at start can delete
	# the site certificate's folder while it is obtained (retried in 60 s).
	storage_clean_interval off
	local_certs
	default_bind 127.0.0.1
	http_port %[3]d
	https_port %[4]d
	auto_https disable_redirects
	log {
		output %[5]s
		level INFO
	}
	acme_proxy {
		database postgres "%[6]s"
	}
}

https://127.0.0.1:%[4]d {
	acme_proxy {
		profile bench
		prefix ` + proxyPrefix + `
		signer local_ca {
			ca local
			lifetime 12h
		}
		resolvers %[7]s
		validation_ports {
			http %[8]d
		}
	}
}
`

// benchFleet is the two instances and the round-robin in front of them.
type benchFleet struct {
	procs []*caddyProcess
	rr    *roundRobin
	err   error
}

// cpu is the CPU both instances have used so far.
func (f *benchFleet) cpu(b *testing.B) time.Duration {
	var sum time.Duration
	for _, p := range f.procs {
		d, err := p.cpu()
		if err != nil {
			b.Fatalf("reading an instance's CPU: %v", err)
		}
		sum += d
	}
	return sum
}

var fleetOnce sync.Once

// getFleet starts the pair the first time (after the harness, whose
// Caddy made the local CA and the site's certificate in the storage the
// pair shares) and fails b if it could not.
func (h *harness) getFleet(b *testing.B) *benchFleet {
	b.Helper()
	fleetOnce.Do(func() {
		h.fleet = &benchFleet{}
		h.fleet.err = h.startFleet()
	})
	if h.fleet.err != nil {
		if errors.Is(h.fleet.err, pgtest.ErrNoPostgres) && os.Getenv("ACMEPROXY_E2E") != "1" {
			b.Skipf("two instances need PostgreSQL: %v", h.fleet.err)
		}
		b.Fatalf("two instances: %v", h.fleet.err)
	}
	return h.fleet
}

func (h *harness) startFleet() error {
	pgtest.Durable = true // no effect if the harness started the cluster, durable already
	dsn, err := pgtest.ProcessDSN()
	if err != nil {
		return err
	}
	logOutput := caddyLogOutput()
	var backends []string
	for _, name := range []string{"a", "b"} {
		dir := filepath.Join(h.dir, "instance-"+name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		ports, err := freePorts(3)
		if err != nil {
			return err
		}
		cfg := fmt.Sprintf(fleetCaddyfile, ports[0], filepath.Join(h.dir, "storage"), ports[1], ports[2],
			logOutput, dsn, h.dnsAddr, h.http01Port)
		// Each its own data and config directories, as on two machines.
		p, err := startCaddyProcess(dir, cfg, h.dnsAddr,
			"XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
		if err != nil {
			return err
		}
		h.cleanup = append(h.cleanup, p.stop)
		h.fleet.procs = append(h.fleet.procs, p)
		site := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
		if err := h.waitForDirectory(site + proxyPrefix + "/directory"); err != nil {
			return fmt.Errorf("instance %s: %w (see caddy.log in %s)", name, err, dir)
		}
		backends = append(backends, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])))
	}
	h.fleet.rr, err = startRoundRobin(backends)
	if err != nil {
		return err
	}
	h.cleanup = append(h.cleanup, h.fleet.rr.close)
	h.dirURLs[twoInstances] = "https://" + h.fleet.rr.addr + proxyPrefix + "/directory"
	return h.waitForDirectory(h.dirURLs[twoInstances])
}

// clientTransport is one client's transport to the pair: two connections
// (two transports like tr), requests alternating between them, each
// connection's local port recorded so that the round-robin can tell whose
// connection it carries.
func (f *benchFleet) clientTransport(tr *http.Transport) http.RoundTripper {
	client := f.rr.clients.Add(1)
	a := &alternatingTransport{}
	for i := range a.rt {
		t := tr.Clone()
		var d net.Dialer
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				f.rr.owner.Store(c.LocalAddr().String(), client)
			}
			return c, err
		}
		a.rt[i] = t
	}
	return a
}

// alternatingTransport sends each request over the other of its two
// transports.
type alternatingTransport struct {
	rt [2]*http.Transport
	n  atomic.Uint64
}

func (a *alternatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return a.rt[a.n.Add(1)%2].RoundTrip(r)
}

func (a *alternatingTransport) CloseIdleConnections() {
	for _, t := range a.rt {
		t.CloseIdleConnections()
	}
}

// roundRobin is a TCP proxy handing each accepted connection to the next
// backend in turn, counting what each backend sends to each client.
type roundRobin struct {
	ln       net.Listener
	addr     string
	backends []string
	next     atomic.Uint64

	clients atomic.Int64 // client numbers given out by clientTransport
	owner   sync.Map     // client connection's local address → client number
	bytes   sync.Map     // rrKey → *atomic.Int64: bytes from the backend
}

// rrKey is a client (-1: not one of clientTransport's) and a backend.
type rrKey struct{ client, backend int64 }

func startRoundRobin(backends []string) (*roundRobin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rr := &roundRobin{ln: ln, addr: ln.Addr().String(), backends: backends}
	go rr.serve()
	return rr, nil
}

func (rr *roundRobin) serve() {
	for {
		c, err := rr.ln.Accept()
		if err != nil {
			return
		}
		backend := int64((rr.next.Add(1) - 1) % uint64(len(rr.backends)))
		go rr.relay(c, backend)
	}
}

func (rr *roundRobin) relay(c net.Conn, backend int64) {
	defer c.Close()
	up, err := net.Dial("tcp", rr.backends[backend])
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(&rrCounter{rr: rr, c: c, backend: backend}, up)
	_ = c.(*net.TCPConn).CloseWrite()
	<-done
}

// rrCounter writes what a backend sends to the client's connection c,
// counting it for the client. It finds the client at its first write:
// the backend writes only after the client's TLS hello, which the client
// sends after clientTransport recorded the connection.
type rrCounter struct {
	rr      *roundRobin
	c       net.Conn
	backend int64
	n       *atomic.Int64
}

func (w *rrCounter) Write(p []byte) (int, error) {
	if w.n == nil {
		client := int64(-1)
		if v, ok := w.rr.owner.Load(w.c.RemoteAddr().String()); ok {
			client = v.(int64)
		}
		v, _ := w.rr.bytes.LoadOrStore(rrKey{client, w.backend}, new(atomic.Int64))
		w.n = v.(*atomic.Int64)
	}
	n, err := w.c.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// rrSnapshot is the bytes each backend has sent to each client.
type rrSnapshot map[rrKey]int64

func (rr *roundRobin) snapshot() rrSnapshot {
	s := rrSnapshot{}
	rr.bytes.Range(func(k, v any) bool {
		s[k.(rrKey)] = v.(*atomic.Int64).Load()
		return true
	})
	return s
}

// check fails b unless each of the last clients clientTransport made got
// answers from both instances since before, and reports instance A's
// share of the bytes.
func (rr *roundRobin) check(b *testing.B, before rrSnapshot, clients int) {
	b.Helper()
	now := rr.snapshot()
	last := rr.clients.Load()
	var perBackend [2]int64
	for c := last - int64(clients) + 1; c <= last; c++ {
		for be := range int64(2) {
			got := now[rrKey{c, be}] - before[rrKey{c, be}]
			perBackend[be] += got
			if got == 0 {
				b.Errorf("client %d got nothing from instance %c: its requests did not reach both", c, 'A'+be)
			}
		}
	}
	b.ReportMetric(float64(perBackend[0])/float64(max(1, perBackend[0]+perBackend[1])), "A-share")
}

// close stops accepting; the relays end with their connections.
func (rr *roundRobin) close() { rr.ln.Close() }
