//go:build unix

package bench

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/crypto/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// clientCounts are the concurrency levels of the comparison.
var clientCounts = []int{1, 8, 32}

// BenchmarkIssuance issues b.N certificates per sub-benchmark through full
// RFC 8555 flows, against acme_proxy and acme_server in the same Caddy,
// with 1, 8 and 32 concurrent clients, each client with its own account.
//
// The two servers run back to back at each concurrency level, so that each
// pair is measured under the same conditions of a shared machine.
func BenchmarkIssuance(b *testing.B) {
	h := getHarness(b)
	for _, n := range clientCounts {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			for _, srv := range []string{acmeProxy, acmeServer} {
				b.Run("server="+srv, func(b *testing.B) {
					h.run(b, srv, n, false)
				})
			}
		})
	}
}

// BenchmarkIssuanceSharedAccount is BenchmarkIssuance with every client
// using one account at once, as a fleet of hosts sharing an account does.
// It is there to find 5xx answers: acme_proxy must have none.
func BenchmarkIssuanceSharedAccount(b *testing.B) {
	h := getHarness(b)
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			for _, srv := range []string{acmeProxy, acmeServer} {
				b.Run("server="+srv, func(b *testing.B) {
					h.run(b, srv, n, true)
				})
			}
		})
	}
}

// pollInterval is the wait between polls of an authorization or an order;
// zero means x/crypto/acme's own Wait* (a second, or Retry-After, between
// polls).
func pollInterval(b *testing.B) time.Duration {
	v := os.Getenv("ACMEPROXY_BENCH_POLL")
	switch v {
	case "":
		return 10 * time.Millisecond
	case "library":
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("ACMEPROXY_BENCH_POLL=%q: want a positive duration or \"library\"", v)
	}
	return d
}

// statusCounts counts the HTTP responses one server gave.
type statusCounts struct {
	requests, non2xx, serverErrors atomic.Int64
	// first5xx describes the first 5xx answer: request and body.
	first5xx atomic.Pointer[string]
}

type countsSnapshot struct{ requests, non2xx, serverErrors int64 }

func (c *statusCounts) snapshot() countsSnapshot {
	return countsSnapshot{c.requests.Load(), c.non2xx.Load(), c.serverErrors.Load()}
}

// countingTransport counts every response by status class.
type countingTransport struct {
	rt     http.RoundTripper
	counts *statusCounts
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.rt.RoundTrip(r)
	if err == nil {
		t.counts.requests.Add(1)
		if res.StatusCode < 200 || res.StatusCode > 299 {
			t.counts.non2xx.Add(1)
		}
		if res.StatusCode >= 500 {
			if t.counts.serverErrors.Add(1) == 1 {
				body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
				res.Body.Close()
				res.Body = io.NopCloser(bytes.NewReader(body))
				what := fmt.Sprintf("%s %s: %d %s", r.Method, r.URL.Path, res.StatusCode, body)
				t.counts.first5xx.Store(&what)
			}
		}
	}
	return res, err
}

// newClient is one ACME client process: its own keep-alive connection to
// Caddy (as a separate host would have), trusting Caddy's local root, with
// a short fixed retry for 5xx and badNonce answers, so that a retry does
// not stall a client for x/crypto's default of a second or more. The same
// settings serve both servers.
func (h *harness) newClient(dirURL string, key *ecdsa.PrivateKey, counts *statusCounts, retry time.Duration) *acme.Client {
	tr := h.clientTransport()
	if retry <= 0 {
		retry = 10 * time.Millisecond
	}
	var rt http.RoundTripper = h.timeline.transport(tr)
	switch dirURL {
	case h.dirURLs[pebbleDirect]:
		rt = pebbleFinalizeLocation{rt}
	case h.dirURLs[twoInstances]:
		rt = h.fleet.clientTransport(tr)
	}
	return &acme.Client{
		Key:          key,
		DirectoryURL: dirURL,
		UserAgent:    "caddy-acme-proxy-bench",
		HTTPClient:   &http.Client{Transport: countingTransport{rt: rt, counts: counts}, Timeout: time.Minute},
		RetryBackoff: func(n int, _ *http.Request, _ *http.Response) time.Duration {
			if n > 10 {
				return 0 // give up
			}
			return retry
		},
	}
}

// clientTransport is one client host's transport to Caddy: a keep-alive
// HTTP/2 connection of its own, trusting the benchmark's roots.
func (h *harness) clientTransport() *http.Transport {
	return &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: h.roots},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     5 * time.Minute,
	}
}

// shareOut runs items 1 to n on workers goroutines under labels, each
// worker taking the next number as it finishes one, and returns the first
// error, which stops the others (ctx, as the items get it, ends then).
func shareOut(ctx context.Context, n, workers int, labels pprof.LabelSet, item func(ctx context.Context, worker int, k int64) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	for w := range workers {
		wg.Add(1)
		go pprof.Do(ctx, labels, func(ctx context.Context) {
			defer wg.Done()
			for {
				k := next.Add(1)
				if k > int64(n) || ctx.Err() != nil {
					return
				}
				if err := item(ctx, w, k); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func newKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// run is one sub-benchmark: accounts first (untimed), then b.N
// certificates shared out among the clients, then the metrics.
func (h *harness) run(b *testing.B, server string, clients int, shared bool) {
	dirURL := h.dirURLs[server]
	poll := pollInterval(b)
	counts := &statusCounts{}
	clients = min(clients, b.N) // the framework's b.N=1 probe needs one client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	labels := pprof.Labels("role", "client", "server", server)

	// Accounts, outside the timed part. The registrations run under the
	// client's pprof labels so that the connections they open (and the
	// goroutines reading them) are labelled as the client's.
	cs := make([]*acme.Client, clients)
	var regErr error
	pprof.Do(ctx, labels, func(ctx context.Context) {
		var sharedKey *ecdsa.PrivateKey
		var sharedKID acme.KeyID
		for i := range cs {
			key := newKey()
			if shared {
				if sharedKey == nil {
					sharedKey = key
				}
				key = sharedKey
			}
			cs[i] = h.newClient(dirURL, key, counts, poll)
			if shared && sharedKID != "" {
				cs[i].KID = sharedKID
				// Open the client's connection and fill its nonce pool.
				if _, err := cs[i].Discover(ctx); err != nil {
					regErr = err
					return
				}
				continue
			}
			acct, err := cs[i].Register(ctx, &acme.Account{}, acme.AcceptTOS)
			if err != nil {
				regErr = fmt.Errorf("registering account %d: %w", i, err)
				return
			}
			sharedKID = acme.KeyID(acct.URI)
		}
	})
	if regErr != nil {
		b.Fatal(regErr)
	}
	// With an alternation between two servers, each client has an
	// account at both and asks the one whose window it starts in.
	var offCS []*acme.Client
	if h.alt != nil && h.altServer != "" {
		offCS = make([]*acme.Client, clients)
		pprof.Do(ctx, labels, func(ctx context.Context) {
			for i := range offCS {
				offCS[i] = h.newClient(h.dirURLs[h.altServer], newKey(), counts, poll)
				if _, err := offCS[i].Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
					regErr = fmt.Errorf("registering account %d at %s: %w", i, h.altServer, err)
					return
				}
			}
		})
		if regErr != nil {
			b.Fatal(regErr)
		}
	}
	b.Cleanup(func() {
		for _, c := range slices.Concat(cs, offCS) {
			c.HTTPClient.CloseIdleConnections()
		}
	})

	var runID [4]byte
	_, _ = rand.Read(runID[:])
	namePrefix := hex.EncodeToString(runID[:])

	var (
		polls     atomic.Int64
		firstErr  error
		latencies = make([][]time.Duration, clients)
		phases    phaseTimes
	)

	caddyProc, _ := h.process(server)
	if caddyProc != nil {
		_ = caddyProc.resetPeakRSS()
	}
	runtime.GC()
	var memBefore, memAfter runtime.MemStats
	runtime.ReadMemStats(&memBefore)
	prof := startServerCPUProfile(b)
	cpuBefore := proccpu.Used()
	caddyBefore := h.caddyCPU(b, server)
	pgBefore := h.postgresCPU(b, server)
	countsBefore := counts.snapshot()
	upstreamBefore := h.upstream.snapshot()
	h.timeline.reset()
	b.ResetTimer()
	start := time.Now()
	if h.alt != nil {
		h.alt.begin(start)
	}
	h.profiled(b, server, func() {
		firstErr = shareOut(ctx, b.N, len(cs), labels, func(ctx context.Context, i int, k int64) error {
			name := fmt.Sprintf("c%d-%s.%s", k, namePrefix, benchZone)
			t0 := time.Now()
			c := cs[i]
			if offCS != nil && h.alt.window0(t0) == 0 {
				c = offCS[i]
			}
			var ph [numPhases]time.Duration
			if err := h.issue(ctx, c, name, poll, &polls, &ph); err != nil {
				return fmt.Errorf("%s: certificate %d (%s): %w", server, k, name, err)
			}
			t1 := time.Now()
			latencies[i] = append(latencies[i], t1.Sub(t0))
			phases.add(&ph)
			if h.alt != nil {
				h.alt.add(t0, t1)
			}
			return nil
		})
	})
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := proccpu.Used() - cpuBefore
	caddyCPU := h.caddyCPU(b, server) - caddyBefore
	pgCPU := h.postgresCPU(b, server) - pgBefore
	serverShare := prof.stop(b)
	runtime.ReadMemStats(&memAfter)
	got := counts.snapshot()

	if firstErr != nil {
		b.Fatal(firstErr)
	}
	all := slices.Concat(latencies...)
	slices.Sort(all)
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "certs/s")
	b.ReportMetric(ms(percentile(all, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(all, 0.99)), "p99-ms")
	b.ReportMetric(float64(memAfter.TotalAlloc-memBefore.TotalAlloc)/n, "B/cert")
	b.ReportMetric(float64(memAfter.Mallocs-memBefore.Mallocs)/n, "allocs/cert")
	b.ReportMetric(ms(cpu)/n, "proc-CPU-ms/cert")
	if caddyProc != nil && server != twoInstances && offCS == nil { // that Caddy does not serve them all
		b.ReportMetric(ms(caddyCPU)/n, "caddy-CPU-ms/cert")
		if rss, err := caddyProc.peakRSS(); err == nil {
			b.ReportMetric(float64(rss)/(1<<20), "caddy-peak-RSS-MiB")
		}
	}
	if serverShare > 0 {
		b.ReportMetric(ms(cpu)/n*serverShare, "server-CPU-ms/cert")
	}
	if usesPostgres(server) {
		b.ReportMetric(ms(pgCPU)/n, "pg-CPU-ms/cert")
	}
	if h.alt != nil {
		h.alt.report(b, start.Add(elapsed))
	}
	b.ReportMetric(float64(got.requests-countsBefore.requests)/n, "req/cert")
	b.ReportMetric(float64(polls.Load())/n, "polls/cert")
	b.ReportMetric(float64(got.non2xx-countsBefore.non2xx), "non2xx")
	fivexx := got.serverErrors - countsBefore.serverErrors
	b.ReportMetric(float64(fivexx), "5xx")
	if server == relayed || server == relayedPrepared {
		h.upstream.report(b, upstreamBefore, b.N, os.Getenv("ACMEPROXY_BENCH_PHASES") == "1")
	}
	if os.Getenv("ACMEPROXY_BENCH_PHASES") == "1" {
		phases.log(b)
	}
	if clients == 1 {
		h.timeline.log(b, b.N)
	}
	if first := counts.first5xx.Load(); first != nil {
		b.Logf("first 5xx of %s (retried by the client): %s", server, *first)
	}
	if fivexx > 0 && server == acmeProxy {
		b.Errorf("acme_proxy answered %d requests with a 5xx status", fivexx)
	}
}

// The phases of one certificate, timed for ACMEPROXY_BENCH_PHASES=1.
const (
	phaseNewOrder = iota
	phaseAuthz
	phaseChallenge
	phaseWaitAuthz
	phaseWaitOrder
	phaseFinalize // finalize and download
	phaseVerify
	phaseFetch // not a phase of its own: part of wait-authz
	numPhases
)

var phaseNames = [numPhases]string{"new-order", "authz", "challenge", "wait-authz", "wait-order", "finalize+cert", "verify",
	"(of wait-authz: until the http-01 fetch)"}

// phaseTimes collects, per phase, the time each certificate spent in it.
type phaseTimes struct {
	mu sync.Mutex
	d  [numPhases][]time.Duration
}

func (p *phaseTimes) add(t *[numPhases]time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range t {
		p.d[i] = append(p.d[i], t[i])
	}
}

// log writes the p50 and p99 of each phase.
func (p *phaseTimes) log(b *testing.B) {
	var sb strings.Builder
	for i, ds := range p.d {
		slices.Sort(ds)
		fmt.Fprintf(&sb, " %s p50 %.2f p99 %.2f;", phaseNames[i], ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)))
	}
	b.Logf("phases (ms):%s", sb.String())
}

// issue obtains one certificate for name and checks it: new-order →
// authorization → http-01 → poll → finalize → download → verify.
func (h *harness) issue(ctx context.Context, c *acme.Client, name string, poll time.Duration, polls *atomic.Int64, phases *[numPhases]time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	certKey := newKey()
	mark := time.Now()
	lap := func(p int) {
		now := time.Now()
		phases[p] += now.Sub(mark)
		mark = now
	}
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs(name))
	if err != nil {
		return fmt.Errorf("new-order: %w", err)
	}
	lap(phaseNewOrder)
	for _, u := range o.AuthzURLs {
		z, err := c.GetAuthorization(ctx, u)
		if err != nil {
			return fmt.Errorf("authorization: %w", err)
		}
		lap(phaseAuthz)
		if z.Status == acme.StatusValid {
			continue
		}
		var chal *acme.Challenge
		for _, ch := range z.Challenges {
			if ch.Type == "http-01" {
				chal = ch
			}
		}
		if chal == nil {
			return fmt.Errorf("no http-01 challenge offered for %s", z.Identifier.Value)
		}
		ka, err := c.HTTP01ChallengeResponse(chal.Token)
		if err != nil {
			return err
		}
		answer := &http01Answer{keyAuth: ka}
		h.tokens.Store(chal.Token, answer)
		defer h.tokens.Delete(chal.Token)
		if _, err := c.Accept(ctx, chal); err != nil {
			return fmt.Errorf("challenge: %w", err)
		}
		lap(phaseChallenge)
		accepted := mark
		if err := waitAuthorization(ctx, c, z.URI, poll, polls); err != nil {
			return fmt.Errorf("authorization of %s: %w", z.Identifier.Value, err)
		}
		lap(phaseWaitAuthz)
		// How long after the challenge POST was answered the server
		// fetched the token: zero when it validated before answering.
		if f := answer.fetched.Load(); f > 0 {
			phases[phaseFetch] += max(0, time.Unix(0, f).Sub(accepted))
		}
	}
	if o, err = waitOrder(ctx, c, o.URI, poll, polls); err != nil {
		return fmt.Errorf("order: %w", err)
	}
	lap(phaseWaitOrder)
	if o.Status != acme.StatusReady {
		return fmt.Errorf("order is %s, want ready", o.Status)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, certKey)
	if err != nil {
		return err
	}
	ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
	if err != nil {
		return fmt.Errorf("finalize: %w", err)
	}
	lap(phaseFinalize)
	err = h.verify(ders, name, certKey, h.rootsOf(c.DirectoryURL))
	lap(phaseVerify)
	return err
}

// waitAuthorization polls an authorization until it is valid: at once,
// then every poll; poll 0 means x/crypto's WaitAuthorization.
func waitAuthorization(ctx context.Context, c *acme.Client, url string, poll time.Duration, polls *atomic.Int64) error {
	if poll == 0 {
		polls.Add(1) // at least one; the library does not say how many
		_, err := c.WaitAuthorization(ctx, url)
		return err
	}
	for {
		polls.Add(1)
		z, err := c.GetAuthorization(ctx, url)
		if err != nil {
			return err
		}
		switch z.Status {
		case acme.StatusValid:
			return nil
		case acme.StatusInvalid, acme.StatusDeactivated, acme.StatusExpired, acme.StatusRevoked:
			return fmt.Errorf("authorization is %s", z.Status)
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// waitOrder polls an order until it is ready or valid, like
// waitAuthorization.
func waitOrder(ctx context.Context, c *acme.Client, url string, poll time.Duration, polls *atomic.Int64) (*acme.Order, error) {
	if poll == 0 {
		polls.Add(1)
		return c.WaitOrder(ctx, url)
	}
	for {
		polls.Add(1)
		o, err := c.GetOrder(ctx, url)
		if err != nil {
			return nil, err
		}
		switch o.Status {
		case acme.StatusReady, acme.StatusValid:
			return o, nil
		case acme.StatusInvalid:
			return nil, &acme.OrderError{OrderURL: url, Status: o.Status, Problem: o.Error}
		}
		if err := sleep(ctx, poll); err != nil {
			return nil, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// verify checks what a server returned: a chain from the leaf to roots
// (Caddy's local root, or Pebble's), for exactly the name asked for, server auth, with the key
// of the CSR. A server that answers fast with a wrong certificate fails
// the benchmark.
func (h *harness) verify(ders [][]byte, name string, key *ecdsa.PrivateKey, roots *x509.CertPool) error {
	if len(ders) == 0 {
		return errors.New("empty certificate chain")
	}
	leaf, err := x509.ParseCertificate(ders[0])
	if err != nil {
		return fmt.Errorf("leaf: %w", err)
	}
	inter := x509.NewCertPool()
	for i, der := range ders[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("chain certificate %d: %w", i+1, err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		DNSName: name, Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("verifying the chain: %w", err)
	}
	if !slices.Equal(leaf.DNSNames, []string{name}) || len(leaf.IPAddresses)+len(leaf.EmailAddresses)+len(leaf.URIs) != 0 {
		return fmt.Errorf("leaf names %v %v %v %v, want exactly %s", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses, leaf.URIs, name)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return errors.New("the leaf's key is not the CSR's")
	}
	return nil
}

// rootsOf is what the certificates of the server at a directory URL chain
// to: Caddy's local root, or the server's own.
func (h *harness) rootsOf(dirURL string) *x509.CertPool {
	for srv, u := range h.dirURLs {
		if u == dirURL && h.chainRoots[srv] != nil {
			return h.chainRoots[srv]
		}
	}
	return h.roots
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// caddyCPU is the CPU the Caddy process serving server has used so far;
// 0 when Caddy runs in this process.
func (h *harness) caddyCPU(b *testing.B, server string) time.Duration {
	p, _ := h.process(server)
	if p == nil {
		return 0
	}
	d, err := p.cpu()
	if err != nil {
		b.Fatalf("reading Caddy's CPU: %v", err)
	}
	return d
}

// usesPostgres reports whether server keeps its store in the benchmark's
// PostgreSQL cluster (ACMEPROXY_BENCH_DATABASE=postgres): acme_proxy, one
// instance or two; acme_server keeps its own files.
func usesPostgres(server string) bool {
	return os.Getenv("ACMEPROXY_BENCH_DATABASE") == "postgres" && server != acmeServer
}

// postgresCPU is the CPU the PostgreSQL cluster has used so far (see
// pgtest.ServerCPU), for a server that uses it; 0 for one that does not.
func (h *harness) postgresCPU(b *testing.B, server string) time.Duration {
	if !usesPostgres(server) {
		return 0
	}
	d, err := pgtest.ServerCPU()
	if err != nil {
		b.Fatalf("reading PostgreSQL's CPU: %v", err)
	}
	return d
}

// serverCPUProfile is a CPU profile of a timed part, for the share of the
// process's CPU that went to the servers: every sample not labelled
// role=client or role=responder (ACMEPROXY_BENCH_SERVER_CPU=1).
type serverCPUProfile struct{ buf *bytes.Buffer }

func startServerCPUProfile(b *testing.B) serverCPUProfile {
	if os.Getenv("ACMEPROXY_BENCH_SERVER_CPU") != "1" {
		return serverCPUProfile{}
	}
	buf := &bytes.Buffer{}
	if err := pprof.StartCPUProfile(buf); err != nil {
		b.Fatalf("ACMEPROXY_BENCH_SERVER_CPU=1 needs the CPU profiler (not with -cpuprofile): %v", err)
	}
	return serverCPUProfile{buf}
}

// stop ends the profile and returns the servers' share of its samples
// (0 when not profiling).
func (p serverCPUProfile) stop(b *testing.B) float64 {
	if p.buf == nil {
		return 0
	}
	pprof.StopCPUProfile()
	prof, err := profile.Parse(p.buf)
	if err != nil {
		b.Fatalf("parsing the CPU profile: %v", err)
	}
	var all, server int64
	for _, s := range prof.Sample {
		v := s.Value[len(s.Value)-1] // cpu nanoseconds
		all += v
		if role := s.Label["role"]; len(role) == 0 {
			server += v
		}
	}
	if all == 0 {
		return 0
	}
	return float64(server) / float64(all)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (t countingTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
