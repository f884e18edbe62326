//go:build unix

package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/proccpu"
)

// floorBody is what the floor route answers, in the Caddyfile's quoting:
// an ACME order as acme_proxy writes one, about as many bytes as its
// answers to a certificate's requests mostly are.
const floorBody = `{\"status\":\"pending\",\"expires\":\"2026-12-04T12:00:00Z\",\"identifiers\":[{\"type\":\"dns\",\"value\":\"c1-0123abcd.bench.example.com\"}],\"authorizations\":[\"https://127.0.0.1/proxy/bench/authz/0123456789abcdef0123456789abcdef\"],\"finalize\":\"https://127.0.0.1/proxy/bench/order/0123456789abcdef0123456789abcdef/finalize\",\"notBefore\":\"2026-12-03T12:00:00Z\",\"notAfter\":\"2026-12-04T00:00:00Z\"}`

// floorRequestsPerSet is what one certificate asks of a server in
// BenchmarkIssuance (its req/cert): new-order, authorization, challenge,
// the authorization's poll, finalize, the order's poll, the certificate.
const floorRequestsPerSet = 7

// BenchmarkHTTPFloor measures what serving a certificate's requests costs
// Caddy when nothing is done with them: each client sends b.N/clients
// sets of seven POSTs of a JWS's size over its own keep-alive HTTP/2
// connection, as BenchmarkIssuance's clients do, to a route that Caddy's
// own `respond` answers with an order-sized body, on the same site, in
// the same Caddy. Its caddy-CPU-ms/set (with ACMEPROXY_BENCH_PROCESS=1)
// is the part of acme_proxy's caddy-CPU-ms/cert that TLS, HTTP/2 and
// Caddy's routing take whatever the handler does — a floor under the
// server's CPU per certificate that no change to the plugin moves.
//
//	ACMEPROXY_BENCH_PROCESS=1 go test -run '^$' -bench HTTPFloor -benchtime 1000x ./bench/
func BenchmarkHTTPFloor(b *testing.B) {
	h := getHarness(b)
	for _, n := range clientCounts {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { h.runFloor(b, n) })
	}
}

func (h *harness) runFloor(b *testing.B, clients int) {
	site := strings.TrimSuffix(h.dirURLs[acmeProxy], proxyPrefix+"/directory")
	// A JWS of a signed ACME request is 600-900 bytes.
	payload := bytes.Repeat([]byte("x"), 700)
	clients = min(clients, b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	labels := pprof.Labels("role", "client", "server", "floor")
	cs := make([]*http.Client, clients)
	for i := range cs {
		cs[i] = &http.Client{Timeout: time.Minute, Transport: h.clientTransport()}
		defer cs[i].CloseIdleConnections()
	}
	post := func(ctx context.Context, c *http.Client, k int64, j int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/floor/%d/%d", site, k, j), bytes.NewReader(payload))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/jose+json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || !strings.HasPrefix(string(body), `{"status":"pending"`) {
			return fmt.Errorf("floor: %s over %s, body %.40q: not the floor route's answer over HTTP/2", resp.Status, resp.Proto, body)
		}
		return nil
	}
	// Each client's connection opened outside the timed part, as the
	// issuance benchmark's registrations open theirs.
	for _, c := range cs {
		if err := post(ctx, c, 0, 0); err != nil {
			b.Fatal(err)
		}
	}

	caddyProc, _ := h.process(acmeProxy)
	cpuBefore := proccpu.Used()
	caddyBefore := h.caddyCPU(b, acmeProxy)
	b.ResetTimer()
	start := time.Now()
	err := shareOut(ctx, b.N, len(cs), labels, func(ctx context.Context, i int, k int64) error {
		for j := range floorRequestsPerSet {
			if err := post(ctx, cs[i], k, j); err != nil {
				return err
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "sets/s")
	b.ReportMetric(ms(proccpu.Used()-cpuBefore)/n, "proc-CPU-ms/set")
	if caddyProc != nil {
		b.ReportMetric(ms(h.caddyCPU(b, acmeProxy)-caddyBefore)/n, "caddy-CPU-ms/set")
	}
}
