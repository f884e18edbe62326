//go:build unix

package bench

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/letsencrypt/pebble/v2/ca"
	pebbledb "github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
)

// Server names of the relay comparison.
const (
	pebbleDirect    = "pebble"         // the client talks to Pebble itself
	relayed         = "relay"          // the client talks to acme_proxy, which relays to that Pebble
	relayedPrepared = "relay_prepared" // the same with prepare_upstream on
)

// relayPrefix is where acme_proxy serves the relay profile,
// relayPreparedPrefix the one with prepare_upstream on.
const (
	relayPrefix         = "/proxy/relay"
	relayPreparedPrefix = "/proxy/relayprep"
)

// BenchmarkRelay issues b.N certificates per sub-benchmark from an
// in-process Pebble that validates nothing (PEBBLE_VA_ALWAYS_VALID=1): with
// the client talking to Pebble directly, through an acme_proxy relay
// profile in front of it (challenge bypass upstream; the client still
// proves its names to acme_proxy by http-01), and through a second one
// with prepare_upstream on, with 1 and 8 clients. The difference is the relay's overhead: its own ACME flow, the
// durable relay_issue job and the upstream flow it drives. acme_proxy with
// its local CA runs in the same run too: a relayed certificate costs at
// least its flow (the client's with acme_proxy) and, unprepared, a whole
// upstream flow (what direct costs) on top.
//
//	go test -run '^$' -bench 'Relay' -benchtime 100x -count 1 ./bench/
func BenchmarkRelay(b *testing.B) {
	h := getHarness(b)
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			for _, srv := range []string{pebbleDirect, acmeProxy, relayed, relayedPrepared} {
				b.Run("server="+srv, func(b *testing.B) {
					h.run(b, srv, n, false)
				})
			}
		})
	}
}

// startPebble runs the upstream of the relay benchmark: Pebble in this
// process, over HTTPS, accepting every challenge untried, answering at
// once (no VA sleeps, no nonce rejections, no authorization reuse). It
// returns the acme_proxy block of the relay profile that relays to it.
func (h *harness) startPebble(dnsPort int) (string, error) {
	// Pebble reads these in va.New and wfe.New.
	h.setenv("PEBBLE_VA_ALWAYS_VALID", "1")
	h.setenv("PEBBLE_VA_NOSLEEP", "1")
	h.setenv("PEBBLE_WFE_NONCEREJECT", "0")
	h.setenv("PEBBLE_AUTHZREUSE", "0")
	logger := log.New(io.Discard, "", 0)
	if os.Getenv("ACMEPROXY_BENCH_LOG") == "stderr" {
		logger = log.New(os.Stderr, "pebble ", log.Lmicroseconds)
	}
	db := pebbledb.NewMemoryStore()
	cai := ca.New(logger, db, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	vai := va.New(logger, 80, 443, false, "", db)
	wfei := wfe.New(logger, db, vai, cai, nil, false, false, 0, 0)
	// Pebble's goroutines carry the pprof label role=pebble, so that a
	// CPU profile tells the upstream's share from the relay's.
	pebbleHandler := h.upstream.handler(h.timeline.handler(wfei.Handler()))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Do(r.Context(), pprof.Labels("role", "pebble"), func(context.Context) { pebbleHandler.ServeHTTP(w, r) })
	}))
	srv.Config.ConnState = h.upstream.connState
	srv.StartTLS()
	h.cleanup = append(h.cleanup, srv.Close)

	tlsFile := filepath.Join(h.dir, "pebble-tls.pem")
	if err := os.WriteFile(tlsFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		return "", err
	}
	h.pebbleTLS = srv.Certificate()
	issued := x509.NewCertPool()
	issued.AddCert(cai.GetRootCert(0).Cert)
	h.chainRoots[pebbleDirect] = issued
	h.chainRoots[relayed] = issued
	h.chainRoots[relayedPrepared] = issued
	h.dirURLs[pebbleDirect] = srv.URL + wfe.DirectoryPath
	block := func(profile, prefix, prepare string) string {
		return fmt.Sprintf(`
	acme_proxy {
		profile %s
		prefix %s
		signer relay {
			directory %s
			trusted_roots %s
			challenge bypass
			prepare_upstream %s
		}
		resolvers 127.0.0.1:%d
		validation_ports {
			http 80
		}
	}
`, profile, prefix, srv.URL+wfe.DirectoryPath, tlsFile, prepare, dnsPort)
	}
	return block("relay", relayPrefix, "off") + block("relayprep", relayPreparedPrefix, "on"), nil
}

// pebbleFinalizeLocation gives Pebble's finalize answers the Location of
// their order. Pebble sends none (RFC 8555 does not require it), and
// x/crypto/acme's CreateOrderCert polls the order of a processing answer
// at its Location, so without this it would poll an empty URL.
type pebbleFinalizeLocation struct{ rt http.RoundTripper }

func (t pebbleFinalizeLocation) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.rt.RoundTrip(r)
	if err == nil && res.Header.Get("Location") == "" {
		if id, ok := strings.CutPrefix(r.URL.Path, "/finalize-order/"); ok {
			u := *r.URL
			u.Path = "/my-order/" + id
			res.Header.Set("Location", u.String())
		}
	}
	return res, err
}

func (t pebbleFinalizeLocation) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
