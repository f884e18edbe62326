package caddyacmeproxy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// A refused value is quoted in the answer (and in the log line Caddy
// writes of it) by its first bytes only: an operator who pasted a file
// where a serial goes (a renew-early of serials read with $(cat …)) is
// told which value is wrong, not sent the file back.
func TestAnAdminErrorQuotesAtMostTheStartOfAValueItRefuses(t *testing.T) {
	long := strings.Repeat("zz\n", 10<<10) // 30 KB
	tests := []struct {
		name, method, uri, body string
	}{
		{"a renew-early serial", "POST", "renew-early", `{"serials":["` + strings.ReplaceAll(long, "\n", `\n`) + `"]}`},
		{"a renew-early identifier", "POST", "renew-early", `{"identifier":"` + strings.ReplaceAll(long, "\n", `\n`) + `"}`},
		{"a renew-early issuer", "POST", "renew-early", `{"issuer":"` + strings.ReplaceAll(long, "\n", `\n`) + `"}`},
		{"a renew-early explanation URL", "POST", "renew-early", `{"orders":["o"],"explanation_url":"ftp://` + strings.Repeat("x", 30<<10) + `"}`},
		{"an orders serial", "GET", "orders?serial=" + url.QueryEscape(long), ""},
		{"an orders status", "GET", "orders?status=" + url.QueryEscape(long), ""},
		{"an accounts status", "GET", "accounts?status=" + url.QueryEscape(long), ""},
		{"a jobs status", "GET", "jobs?status=" + url.QueryEscape(long), ""},
		{"a jobs abandon_owed", "GET", "jobs?abandon_owed=" + url.QueryEscape(long), ""},
		{"an audit event", "GET", "audit?event=" + url.QueryEscape(long), ""},
		{"an audit outcome", "GET", "audit?outcome=" + url.QueryEscape(long), ""},
		{"an audit since", "GET", "audit?since=" + url.QueryEscape(long), ""},
		{"a limit", "GET", "orders?limit=" + url.QueryEscape(long), ""},
		{"a parameter's name", "GET", "orders?" + strings.Repeat("n", 30<<10) + "=1", ""},
		{"a field's name", "POST", "eab/create", `{"` + strings.Repeat("f", 30<<10) + `":1}`},
		{"an EAB key's expiry", "POST", "eab/create", `{"profile":"p","label":"l","expires":"` + strings.Repeat("9", 30<<10) + `"}`},
		{"a revocation reason's number", "POST", "orders/o/revoke", `{"reason":` + strings.Repeat("9", 30<<10) + `}`},
	}
	a := fuzzAdminAPI(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, adminBase+tt.uri, strings.NewReader(tt.body))
			err := a.serve(httptest.NewRecorder(), r)
			ae, ok := errors.AsType[caddy.APIError](err)
			if !ok || ae.HTTPStatus != http.StatusBadRequest {
				t.Fatalf("%s %s…: %v; want a 400", tt.method, tt.uri[:min(len(tt.uri), 40)], err)
			}
			if len(ae.Message) > 1024 || len(err.Error()) > 1024 {
				t.Errorf("an answer of %d bytes, a log line of %d; want at most 1024: %.200q…", len(ae.Message), len(err.Error()), ae.Message)
			}
		})
	}
}

// A renew-early's explanation URL refused for carrying credentials is
// not quoted with them, in the answer or the log line.
func TestARefusedExplanationURLIsNotQuotedWithItsCredentials(t *testing.T) {
	a := fuzzAdminAPI(t)
	for _, tc := range []struct{ name, url string }{
		{"a user and a password", "https://ops:hunter2@wiki.example.com/ca-rotation"},
		{"a token as the user", "https://hunter2@wiki.example.com/ca-rotation"},
		{"a password in a URL that does not parse", "https://ops:hunter2@wiki.example.com:port/ca-rotation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, adminBase+"renew-early",
				strings.NewReader(`{"orders":["o"],"explanation_url":"`+tc.url+`"}`))
			err := a.serve(httptest.NewRecorder(), r)
			ae, ok := errors.AsType[caddy.APIError](err)
			if !ok || ae.HTTPStatus != http.StatusBadRequest {
				t.Fatalf("renew-early: %v; want a 400", err)
			}
			if strings.Contains(ae.Message, "hunter2") || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the refusal quotes the credentials: %q", ae.Message)
			}
			if !strings.Contains(ae.Message, "explanation_url") {
				t.Errorf("the refusal %q does not name the field", ae.Message)
			}
		})
	}
}

// A request by the wrong method is told which to use without being sent
// its path or its method back: a route's path may be padded with slashes
// (they are trimmed to find it) and a method is any token, as long as
// the request line Caddy's admin endpoint reads.
func TestAnAdminMethodNotAllowedQuotesAtMostTheStartOfThePathAndMethod(t *testing.T) {
	tests := []struct {
		name, method, uri string
	}{
		{"a path padded with slashes", http.MethodGet, "orders/o/revoke" + strings.Repeat("/", 30<<10)},
		{"a path of many leading slashes", http.MethodGet, strings.Repeat("/", 30<<10) + "renew-early"},
		{"a long method", strings.Repeat("M", 30<<10), "orders"},
	}
	a := fuzzAdminAPI(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, adminBase+tt.uri, nil)
			r.Method = tt.method
			err := a.serve(httptest.NewRecorder(), r)
			ae, ok := errors.AsType[caddy.APIError](err)
			if !ok || ae.HTTPStatus != http.StatusMethodNotAllowed {
				t.Fatalf("%.40s %.40s…: %.200v; want a 405", tt.method, tt.uri, err)
			}
			if len(ae.Message) > 1024 || len(err.Error()) > 1024 {
				t.Errorf("an answer of %d bytes, a log line of %d; want at most 1024: %.200q…", len(ae.Message), len(err.Error()), ae.Message)
			}
		})
	}
}
