//go:build unix

package bench

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// timeline is ACMEPROXY_BENCH_TIMELINE=1: every request a client sends
// (to acme_proxy or Pebble) and every request Pebble serves (the direct
// client's or the relay's) notes when it began and ended. At one client
// the events of a sub-benchmark follow one another, so the gaps between
// consecutive events add up to its wall time, and the gaps labelled by
// the two events around them (summed over the run, per certificate) say
// where a certificate's time goes: in a request, in the server between
// the client's request and the relay's first upstream request, in a
// poll's sleep.
type timeline struct {
	on bool
	mu sync.Mutex
	ev []tlEvent
}

type tlEvent struct {
	at   time.Time
	what string
}

func newTimeline() *timeline { return &timeline{on: os.Getenv("ACMEPROXY_BENCH_TIMELINE") == "1"} }

func (t *timeline) note(what string) {
	if t == nil || !t.on {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.ev = append(t.ev, tlEvent{now, what})
	t.mu.Unlock()
}

// reset drops what was noted so far (before a timed part).
func (t *timeline) reset() {
	if t == nil || !t.on {
		return
	}
	t.mu.Lock()
	t.ev = t.ev[:0]
	t.mu.Unlock()
}

// log writes, per label "event → next event", its total over the run per
// certificate, its count per certificate and its median, largest total
// first, down to 98 % of the wall time. Meaningful at one client only.
func (t *timeline) log(b *testing.B, certs int) {
	if t == nil || !t.on || certs == 0 {
		return
	}
	t.mu.Lock()
	ev := slices.Clone(t.ev)
	t.mu.Unlock()
	slices.SortStableFunc(ev, func(a, b tlEvent) int { return a.at.Compare(b.at) })
	type gap struct {
		label string
		total time.Duration
		ds    []time.Duration
	}
	gaps := map[string]*gap{}
	var all time.Duration
	for i := 1; i < len(ev); i++ {
		label := ev[i-1].what + " → " + ev[i].what
		g := gaps[label]
		if g == nil {
			g = &gap{label: label}
			gaps[label] = g
		}
		d := ev[i].at.Sub(ev[i-1].at)
		g.total += d
		g.ds = append(g.ds, d)
		all += d
	}
	sorted := slices.SortedFunc(func(yield func(*gap) bool) {
		for _, g := range gaps {
			if !yield(g) {
				return
			}
		}
	}, func(a, b *gap) int { return cmp.Compare(b.total, a.total) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "timeline: %.2f ms per certificate between the first and the last event; per gap: ms/cert, count/cert, p50 ms\n",
		ms(all)/float64(certs))
	var shown time.Duration
	for _, g := range sorted {
		if shown > all*98/100 {
			break
		}
		shown += g.total
		slices.Sort(g.ds)
		fmt.Fprintf(&sb, "  %7.2f  %4.1f  %6.2f  %s\n", ms(g.total)/float64(certs), float64(len(g.ds))/float64(certs),
			ms(percentile(g.ds, 0.5)), g.label)
	}
	b.Log(sb.String())
}

// transport notes a client's requests: "C> POST finalize" when sent,
// "C< POST finalize 200" when answered.
func (t *timeline) transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil || !t.on {
		return rt
	}
	return timelineTransport{rt: rt, t: t}
}

type timelineTransport struct {
	rt http.RoundTripper
	t  *timeline
}

func (tt timelineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	what := r.Method + " " + pathShape(r.URL.Path)
	tt.t.note("C> " + what)
	res, err := tt.rt.RoundTrip(r)
	if err != nil {
		tt.t.note("C< " + what + " error")
		return res, err
	}
	tt.t.note(fmt.Sprintf("C< %s %d", what, res.StatusCode))
	return res, err
}

func (tt timelineTransport) CloseIdleConnections() {
	if c, ok := tt.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// handler notes the requests Pebble serves, by whom (the relay, or the
// benchmark's own client talking to Pebble directly): "P> relay POST
// finalize-order" when it begins, "P< relay POST finalize-order 200" when
// the handler returns.
func (t *timeline) handler(next http.Handler) http.Handler {
	if t == nil || !t.on {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := "relay"
		if strings.Contains(r.UserAgent(), "bench") {
			who = "client"
		}
		what := who + " " + r.Method + " " + pathShape(r.URL.Path)
		t.note("P> " + what)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		t.note(fmt.Sprintf("P< %s %d", what, sw.status))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// pathShape is a request path without its identifiers and prefix: each
// segment that looks like an ID (long, or with a digit) is dropped, and so
// is what comes before the last two named segments.
func pathShape(p string) string {
	for _, prefix := range []string{relayPreparedPrefix, relayPrefix, proxyPrefix} {
		if rest, ok := strings.CutPrefix(p, prefix+"/"); ok {
			p = rest
			break
		}
	}
	segs := strings.Split(strings.Trim(p, "/"), "/")
	var named []string
	for _, s := range segs {
		if len(s) >= 16 || strings.ContainsAny(s, "0123456789") {
			continue
		}
		named = append(named, s)
	}
	if len(named) > 2 {
		named = named[len(named)-2:]
	}
	if len(named) == 0 {
		return "/"
	}
	return strings.Join(named, "/")
}
