package caddyacmeproxy

import (
	"context"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
)

// requestLog records the method and path of every request a client sends.
type requestLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.Path)
	l.mu.Unlock()
	return l.next.RoundTrip(r)
}

func (l *requestLog) since(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs[i:]...)
}

func TestARelayedFinalizeAnswersValidWhenTheUpstreamIsQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _, c := startRelay(t, ctx)
	o := b.readyOrder(t, ctx, c, "quick.example.com")

	log := &requestLog{next: c.HTTPClient.Transport}
	c.HTTPClient = &http.Client{Transport: log}
	start := time.Now()
	ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, "quick.example.com"), true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	t.Logf("finalize to certificate: %s", time.Since(start).Round(time.Millisecond))
	if len(ders) == 0 {
		t.Fatal("no certificate")
	}
	// x/crypto polls the order only when the finalize answer is not
	// valid; after a valid one it fetches the certificate at once.
	orderPath := "/order/" + path.Base(o.URI)
	for _, r := range log.since(0) {
		if strings.HasSuffix(r, orderPath) {
			t.Errorf("the client polled the order (%s) after finalize; want the finalize to answer valid with the certificate", r)
		}
	}
}
