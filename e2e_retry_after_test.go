package caddyacmeproxy

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"

	xacme "golang.org/x/crypto/acme"
)

// A challenge the server is still validating must say when to poll again
// (RFC 8555 §8.2: "The server MUST provide information about its retry
// state ... via ... the Retry-After HTTP header field in response to
// requests to the challenge resource"). lego falls back to a 5s (±50%)
// first poll per authorization without it.
func TestAChallengeBeingValidatedTellsTheClientWhenToPollAgain(t *testing.T) {
	env := newE2EEnv(t)
	ln := e2eListen(t)
	srv := serveE2EHTTP01(t, ln)
	env.load(t, e2eConfig{ValidationHTTP: e2ePort(ln), ValidationTLS: freePort(t)})

	ctx, cancel := context.WithTimeout(t.Context(), e2eWait)
	defer cancel()
	c := newE2EXCrypto(ctx, t, env)
	rec := &headerRecorder{base: env.client.Transport, byURL: map[string]http.Header{}}
	c.HTTPClient = &http.Client{Transport: rec, Timeout: env.client.Timeout}

	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs("retry-after.example.com"))
	if err != nil {
		t.Fatalf("AuthorizeOrder: %v", err)
	}
	ch := e2ePendingHTTP01(ctx, t, c, srv, order.AuthzURLs[0])
	// Keep the validation running while the client looks.
	arrived, release := srv.holdBack(ch.Token)
	defer release()
	got, err := c.Accept(ctx, ch)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if got.Status != xacme.StatusProcessing {
		t.Fatalf("challenge status %q right after the POST, want processing", got.Status)
	}
	<-arrived
	ra := rec.header(ch.URI).Get("Retry-After")
	if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 10 {
		t.Errorf("challenge POST answered processing with Retry-After %q; want a few seconds", ra)
	}
}

// headerRecorder keeps the response headers of the last request to each URL.
type headerRecorder struct {
	base  http.RoundTripper
	mu    sync.Mutex
	byURL map[string]http.Header
}

func (r *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.byURL[req.URL.String()] = resp.Header.Clone()
		r.mu.Unlock()
	}
	return resp, err
}

func (r *headerRecorder) header(url string) http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byURL[url]
}
