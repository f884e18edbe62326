package validate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// bodyServer answers GET /.well-known/acme-challenge/<token> with
// bodies[token], byte for byte, and returns its port.
func bodyServer(t *testing.T, bodies map[string]string) int {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.URL.Path, "/.well-known/acme-challenge/")
		body, known := bodies[tok]
		if !ok || !known {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return port(t, s.URL)
}

// RFC 8555 §8.3: the body is the key authorization; "the server SHOULD
// ignore whitespace characters at the end of the body". The rule here
// ignores trailing space, tab, CR and LF, and nothing else: not leading
// whitespace, not text after the key authorization, not a part of it.
func TestHTTP01AcceptsTheKeyAuthorizationAndTrailingWhitespaceOnly(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		valid bool
	}{
		{name: "ok/the key authorization alone", body: testKeyAuth, valid: true},
		{name: "ok/a trailing LF", body: testKeyAuth + "\n", valid: true},
		{name: "ok/a trailing CRLF", body: testKeyAuth + "\r\n", valid: true},
		{name: "ok/trailing spaces", body: testKeyAuth + "   ", valid: true},
		{name: "ok/a trailing tab", body: testKeyAuth + "\t", valid: true},
		{name: "ok/a run of mixed trailing whitespace", body: testKeyAuth + " \t\r\n \n\n", valid: true},
		{name: "fail/the key authorization followed by garbage", body: testKeyAuth + "garbage"},
		{name: "fail/the key authorization followed by a dot and more", body: testKeyAuth + ".extra"},
		{name: "fail/garbage after trailing whitespace", body: testKeyAuth + "\ngarbage"},
		{name: "fail/garbage after a space", body: testKeyAuth + " garbage\n"},
		{name: "fail/the key authorization twice", body: testKeyAuth + testKeyAuth},
		{name: "fail/the key authorization twice on two lines", body: testKeyAuth + "\n" + testKeyAuth + "\n"},
		{name: "fail/a trailing NUL is not whitespace", body: testKeyAuth + "\x00"},
		{name: "fail/a leading space", body: " " + testKeyAuth},
		{name: "fail/a leading newline", body: "\n" + testKeyAuth},
		{name: "fail/the key authorization less its last character", body: testKeyAuth[:len(testKeyAuth)-1]},
		{name: "fail/the token alone", body: testToken},
		{name: "fail/the token and the dot alone", body: testToken + "."},
		{name: "fail/an empty body", body: ""},
		{name: "fail/whitespace alone", body: " \r\n"},
		{name: "fail/the key authorization in another case", body: strings.ToUpper(testKeyAuth)},
	}
	bodies := map[string]string{}
	tokens := map[string]string{}
	for i, tt := range tests {
		tok := fmt.Sprintf("case%d", i)
		bodies[tok], tokens[tt.name] = tt.body, tok
	}
	httpPort := bodyServer(t, bodies)
	v := newValidator(t, Config{HTTPPort: httpPort, Timeout: 5 * time.Second, Dial: loopbackDial("127.0.0.1")})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.HTTP01(context.Background(), acme.IdentifierIP, "127.0.0.1", tokens[tt.name], testKeyAuth)
			if tt.valid {
				wantOutcome(t, err, "")
				return
			}
			wantOutcome(t, err, acme.ErrorIncorrectResponse)
		})
	}
}

// smallBufferListener shrinks the send buffer of every connection it
// accepts, so that the kernel holds little of what a handler writes
// that the peer has not read.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(32 << 10)
	}
	return c, err
}

// A client's web server may answer with a body that never ends. The
// validator reads at most maxBody+1 bytes of it and hangs up: the
// handler's writes fail long before it has written what it meant to.
func TestHTTP01StopsReadingAnEndlessBodyAtTheCap(t *testing.T) {
	const (
		endless = 64 << 20 // what the handler means to write
		// The most the validator may let the handler write: the cap, plus
		// what the two small socket buffers and the server's buffering
		// hold, with a wide margin. An unbounded read takes all 64 MiB.
		allowed = 4 << 20
		chunk   = 32 << 10
	)
	var written atomic.Int64
	done := make(chan error, 1)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		// The key authorization first, so only the length can refuse it.
		n, err := fmt.Fprint(w, testKeyAuth)
		written.Add(int64(n))
		buf := []byte(strings.Repeat(" ", chunk))
		for err == nil && written.Load() < endless {
			n, err = w.Write(buf)
			written.Add(int64(n))
			if err == nil {
				err = http.NewResponseController(w).Flush()
			}
		}
		done <- err
	}))
	s.Listener = smallBufferListener{s.Listener}
	s.Start()
	t.Cleanup(s.Close)

	// The validator's side of the connection gets a small receive buffer
	// too, which also turns off the kernel's growing of it.
	dial := loopbackDial("127.0.0.1")
	smallDial := func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(32 << 10)
		}
		return c, err
	}
	v := newValidator(t, Config{HTTPPort: port(t, s.URL), Timeout: 10 * time.Second, Dial: smallDial})
	p := wantOutcome(t, v.HTTP01(context.Background(), acme.IdentifierIP, "127.0.0.1", "endless", testKeyAuth), acme.ErrorIncorrectResponse)
	// The detail says no more about the body than for any wrong answer:
	// its size is an oracle for whatever the fetch reached.
	if strings.Contains(p.Detail, "larger") || strings.Contains(p.Detail, "bytes") {
		t.Errorf("detail %q speaks of the response's size", p.Detail)
	}

	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the handler wrote all %d bytes without an error: the validator read the whole body", endless)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the handler is still writing after the validation ended (%d bytes so far): the connection was not closed", written.Load())
	}
	if n := written.Load(); n > allowed {
		t.Errorf("the handler wrote %d bytes before the validator hung up; want at most %d (the cap is %d)", n, allowed, maxBody)
	}
	t.Logf("the handler wrote %d bytes", written.Load())
}
