package validate

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// maxBody is the most of an http-01 response that is read. A key
// authorization is well under 200 bytes; one byte more than maxBody is
// read to tell a response that fits from one that does not.
const maxBody = 8 << 10

// trailingSpace is what RFC 8555 §8.3 lets a server ignore at the end of
// the body ("The server SHOULD ignore whitespace characters at the end of
// the body").
const trailingSpace = " \t\r\n"

// newHTTPClient builds the client of http-01: no proxy from the
// environment, no connection reuse, no transparent decompression, and a
// redirect policy checked by v.checkRedirect. Certificates of an https
// redirect target are not verified, as in Boulder: the key authorization
// in the body is the proof, not the certificate.
func newHTTPClient(v *Validator) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            v.dial,
			TLSClientConfig:        &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: 16 << 10,
		},
		CheckRedirect: v.checkRedirect,
	}
}

// checkRedirect follows at most v.maxRedirects redirects, and only to http
// on the HTTP port or https on the TLS port (RFC 8555 §8.3 lets the server
// follow redirects; Boulder's rule restricts them to 80 and 443), of a DNS
// name that the redirect policy allows, or of an IP identifier's own
// address (never another IP address). Where the name resolves is the
// dialer's to check.
func (v *Validator) checkRedirect(req *http.Request, via []*http.Request) error {
	first := redacted(via[0].URL)
	if len(via) > v.maxRedirects {
		return problem.ConnectionF("fetching %s: more than %d redirects", first, v.maxRedirects)
	}
	u := req.URL
	want := 0
	switch u.Scheme {
	case "http":
		want = v.httpPort
	case "https":
		want = v.tlsPort
	default:
		return problem.ConnectionF("fetching %s: a redirect to a %q URL is not allowed: only http on port %d and https on port %d", first, clip(u.Scheme), v.httpPort, v.tlsPort)
	}
	if u.Hostname() == "" {
		return problem.ConnectionF("fetching %s: a redirect to a URL without a host is not allowed", first)
	}
	port := effectivePort(u)
	if port != want {
		return problem.ConnectionF("fetching %s: a redirect to %s://%s is not allowed: only http on port %d and https on port %d", first, u.Scheme, clip(u.Host), v.httpPort, v.tlsPort)
	}
	host := u.Hostname()
	if addressLike(host) {
		// The identifier's own address (an IP identifier's http→https
		// or relative redirect) is where validation connected already;
		// any other address is a redirect to where the client may not
		// send us.
		if sameHost(via[0].URL.Hostname(), host) && addressIs(via[0].URL.Hostname()) {
			return nil
		}
		return problem.ConnectionF("fetching %s: a redirect to the IP address %s is not allowed: only to a DNS name, or to an IP identifier's own address", first, clip(host))
	}
	if v.redirectOK != nil {
		if err := v.redirectOK(host); err != nil {
			return problem.ConnectionF("fetching %s: a redirect to %s is not allowed: %s", first, clip(host), clip(err.Error()))
		}
	}
	return nil
}

// addressIs reports whether host is an IP address in a form netip reads.
func addressIs(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// addressLike reports whether host is an IP address, or a spelling of one
// that a resolver may accept (inet_aton's "127.1", "0x7f000001",
// "2130706433"): a name whose last label is a decimal or 0x-hexadecimal
// number, which no top-level domain is.
func addressLike(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	h := strings.TrimSuffix(host, ".")
	last := strings.ToLower(h[strings.LastIndexByte(h, '.')+1:])
	if last == "" {
		return false
	}
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// effectivePort is u's port, explicit or implied by its scheme; -1 if
// it is not a number.
func effectivePort(u *url.URL) int {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443
		}
		return 80
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// clip shortens a string the client's server chose to a length fit for
// a problem detail.
func clip(s string) string {
	return textcut.Clip(s, 256, "…")
}

// redacted is u without user info and query, for a problem detail.
func redacted(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = "", false, "", ""
	return clip(c.String())
}

// HTTP01 validates an http-01 challenge (RFC 8555 §8.3; RFC 8738 §4 for
// IP identifiers): it fetches
// http://<identifier>:<HTTPPort>/.well-known/acme-challenge/<token> and
// checks that the body, less trailing whitespace, is keyAuth.
func (v *Validator) HTTP01(ctx context.Context, identType, identValue, token, keyAuth string) error {
	host, _, err := hostOf(identType, identValue)
	if err != nil {
		return err
	}
	if !isToken(token) {
		return fmt.Errorf("validate: token %q is not a base64url string", token)
	}
	hostPort := host
	if v.httpPort != 80 {
		hostPort = net.JoinHostPort(host, strconv.Itoa(v.httpPort))
	} else if strings.Contains(host, ":") {
		hostPort = "[" + host + "]"
	}
	u := &url.URL{Scheme: "http", Host: hostPort, Path: "/.well-known/acme-challenge/" + token}
	what := "fetching " + u.String()

	tctx, cancel := v.withTimeout(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(withIdentHost(tctx, host), http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("validate: %s: %w", what, err)
	}
	// The Host header names the identifier alone, whatever the port.
	req.Host = host
	if strings.Contains(host, ":") {
		req.Host = "[" + host + "]"
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "*/*")

	resp, err := v.httpClient.Do(req)
	if err != nil {
		return v.failed(ctx, what, err)
	}
	defer resp.Body.Close()
	if final := redacted(resp.Request.URL); final != u.String() {
		what += " (redirected to " + final + ")"
	}
	if resp.StatusCode != http.StatusOK {
		return problem.IncorrectResponseF("%s: the server answered %d %s, not 200 OK", what, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return v.failed(ctx, "reading the response to "+what, err)
	}
	// The detail says nothing of the body, not even its size: what
	// validation fetched is not for the client to learn.
	if len(body) > maxBody || strings.TrimRight(string(body), trailingSpace) != keyAuth {
		return problem.IncorrectResponseF("%s: the response is not the expected key authorization", what)
	}
	return nil
}

// isToken reports whether s is a non-empty string of the base64url
// alphabet, as a challenge token must be (RFC 8555 §8.1, §8.3).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
