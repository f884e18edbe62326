package caddyacmeproxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
)

// What the admin endpoint answers an error with is printed as the CLI's
// error, in the terminal: the server's message, on one line of plain
// text — a message may quote what a client or an upstream CA chose (a
// relaying CA's problem detail in a refused revocation) — and, from a
// server that is not the acme_proxy admin API (an HTML page, a Caddy
// built without the plugin), a short excerpt saying so rather than the
// whole page and a Go error's prefix.
func TestTheCLIPrintsAnAdminErrorAsOneLineOfPlainText(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        []string // substrings of the error
		notWant     []string
		maxLen      int
	}{
		{"an escape sequence in the server's message is written out", http.StatusConflict, "application/json",
			`{"error":"conflict: the backend refused: \u001b]0;pwned\u0007\u001b[2K done"}` + "\n",
			[]string{`HTTP 409: conflict: the backend refused: \x1b]0;pwned\a\x1b[2K done`}, []string{"caddy responded"}, 0},
		{"a line break in the server's message does not start a line of its own", http.StatusBadRequest, "application/json",
			`{"error":"invalid request: a\nError: forged"}` + "\n",
			[]string{`HTTP 400: invalid request: a\nError: forged`}, nil, 0},
		{"a server that is not the admin API is named so, by an excerpt of its answer", http.StatusNotFound, "text/plain",
			"404 page not found\n", []string{"HTTP 404", "not an answer of the acme_proxy admin API", "404 page not found"}, []string{"caddy responded"}, 0},
		{"a whole HTML page is cut to an excerpt", http.StatusBadGateway, "text/html",
			"<html><body>" + strings.Repeat("<p>bad gateway</p>\r\n", 500) + "</body></html>",
			[]string{"HTTP 502", "<html><body><p>bad gateway</p>"}, nil, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			t.Cleanup(ts.Close)
			_, err := runCLI("jobs", "cancel", "5", "--address", ts.Listener.Addr().String())
			if err == nil {
				t.Fatal("jobs cancel succeeded; want the server's error")
			}
			msg := err.Error()
			if !utf8.ValidString(msg) {
				t.Errorf("the error is not UTF-8: %q", msg)
			}
			if i := strings.IndexFunc(msg, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }); i >= 0 {
				t.Errorf("the error holds %U: %q", []rune(msg[i:])[0], operator.Clip(msg))
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the error %q lacks %q", msg, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("the error %q has %q", msg, w)
				}
			}
			if tt.maxLen > 0 && len(msg) > tt.maxLen {
				t.Errorf("an error of %d bytes; want at most %d: %q", len(msg), tt.maxLen, operator.Clip(msg))
			}
		})
	}
}

// With no admin endpoint at the address, the CLI says which address it
// asked and how to name another, rather than only a dial error.
func TestTheCLINamesTheAddressWhereNoAdminEndpointAnswered(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, err := runCLI("profiles", "--address", addr)
	if err == nil {
		t.Fatal("profiles succeeded with no admin endpoint there")
	}
	for _, w := range []string{"no answer from Caddy's admin API at " + addr, "--address", "connect"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error %q lacks %q", err, w)
		}
	}
}
