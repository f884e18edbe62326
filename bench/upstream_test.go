//go:build unix

package bench

import (
	"cmp"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// upstreamCounts counts the requests the relay benchmark's Pebble serves
// from the relay (not from the benchmark's own clients), by kind (method
// and path shape): a sub-benchmark through a relay profile reports their
// number per certificate as upstream-req/cert, and, with
// ACMEPROXY_BENCH_PHASES=1, logs them by kind — how many upstream
// requests (polls included) a relayed certificate costs at any number of
// clients, where the timeline is readable at one client only.
type upstreamCounts struct {
	mu sync.Mutex
	n  map[string]int
	// conns counts the connections Pebble accepted (anyone's): the
	// relay's beyond its first few are TLS handshakes its pool did not
	// spare it.
	conns atomic.Int64
}

func (u *upstreamCounts) connState(_ net.Conn, st http.ConnState) {
	if st == http.StateNew {
		u.conns.Add(1)
	}
}

func (u *upstreamCounts) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.UserAgent(), "bench") {
			what := r.Method + " " + pathShape(r.URL.Path)
			u.mu.Lock()
			if u.n == nil {
				u.n = map[string]int{}
			}
			u.n[what]++
			u.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// connsKey is where a snapshot holds the connection count.
const connsKey = "(connections)"

// snapshot is a copy of the counts so far.
func (u *upstreamCounts) snapshot() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]int, len(u.n)+1)
	out[connsKey] = int(u.conns.Load())
	for k, v := range u.n {
		out[k] = v
	}
	return out
}

// report adds upstream-req/cert for the requests counted since before,
// and with ACMEPROXY_BENCH_PHASES=1 logs them by kind.
func (u *upstreamCounts) report(b *testing.B, before map[string]int, certs int, phases bool) {
	after := u.snapshot()
	type kind struct {
		what string
		n    int
	}
	var kinds []kind
	total := 0
	conns := after[connsKey] - before[connsKey]
	delete(after, connsKey)
	b.ReportMetric(float64(conns), "upstream-conns")
	for what, n := range after {
		if d := n - before[what]; d > 0 {
			kinds = append(kinds, kind{what, d})
			total += d
		}
	}
	b.ReportMetric(float64(total)/float64(certs), "upstream-req/cert")
	if !phases {
		return
	}
	slices.SortFunc(kinds, func(a, b kind) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.what, b.what)) })
	var sb strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&sb, " %s %.2f;", k.what, float64(k.n)/float64(certs))
	}
	b.Logf("upstream requests per certificate:%s", sb.String())
}
