package validate

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// testKeyAuth is a key authorization of the form token "." thumbprint.
const (
	testToken   = "tok_EN-123"
	testKeyAuth = testToken + ".aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789-_abcde"
)

// wantOutcome checks a validation result: nil when want is empty, else a
// problem of type want.
func wantOutcome(t *testing.T, err error, want acme.ProblemType) *problem.Problem {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("got %v, want valid", err)
		}
		return nil
	}
	p, ok := problem.As(err)
	if !ok {
		t.Fatalf("got %v (%T), want a %s problem", err, err, want)
	}
	if p.Type != want {
		t.Fatalf("got problem %s, want type %s", p, want)
	}
	if p.Detail == "" {
		t.Fatalf("problem %s has no detail", p.Type)
	}
	t.Logf("detail: %s", p.Detail)
	return p
}

// wantFault checks that err is a fault on our side, not a problem.
func wantFault(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("got valid, want an error")
	}
	if p, ok := problem.As(err); ok {
		t.Fatalf("got problem %s, want a plain error", p)
	}
}

func newValidator(t *testing.T, cfg Config) *Validator {
	t.Helper()
	v, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// loopbackDial sends every connection to 127.0.0.1 on the port asked
// for, as if every name resolved there, and refuses any other host than
// those listed.
func loopbackDial(hosts ...string) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		for _, h := range hosts {
			if strings.EqualFold(h, host) {
				var d net.Dialer
				return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
			}
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
}

// freePort returns a loopback TCP port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestNewRefusesABadFieldByName(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"fail/negative HTTP port", Config{HTTPPort: -1}, "HTTPPort"},
		{"fail/HTTP port above 65535", Config{HTTPPort: 65536}, "HTTPPort"},
		{"fail/TLS port above 65535", Config{TLSPort: 70000}, "TLSPort"},
		{"fail/negative timeout", Config{Timeout: -time.Second}, "Timeout"},
		{"fail/negative redirect limit", Config{MaxRedirects: -1}, "MaxRedirects"},
		{"fail/resolver without port", Config{Resolvers: []string{"8.8.8.8:53", "dns.example"}}, "Resolvers[1]"},
		{"fail/resolver with a bad port", Config{Resolvers: []string{"127.0.0.1:domain"}}, "Resolvers[0]"},
		{"fail/resolver with an empty host", Config{Resolvers: []string{":53"}}, "Resolvers[0]"},
		{"fail/resolver named by a host name and port", Config{Resolvers: []string{"10.0.0.53", "ns.example.com:53"}}, "Resolvers[1]"},
		{"fail/resolver with a port above 65535", Config{Resolvers: []string{"a:99999"}}, "Resolvers[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestNewFillsInDefaults(t *testing.T) {
	v := newValidator(t, Config{Resolvers: []string{"192.0.2.1", "[2001:db8::1]:5353"}})
	if v.httpPort != 80 || v.tlsPort != 443 || v.timeout != 10*time.Second || v.maxRedirects != 5 {
		t.Errorf("defaults: http %d, tls %d, timeout %s, redirects %d", v.httpPort, v.tlsPort, v.timeout, v.maxRedirects)
	}
	want := []string{"192.0.2.1:53", "[2001:db8::1]:5353"}
	if strings.Join(v.resolvers, " ") != strings.Join(want, " ") {
		t.Errorf("resolvers %q, want %q", v.resolvers, want)
	}
}

func TestAResolverIsAnIPAddressWithAnOptionalPort(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // "" when refused
		refusal  string // part of the refusal
	}{
		{"ok/IPv4 address", "10.0.0.53", "10.0.0.53:53", ""},
		{"ok/IPv4 address and port", "10.0.0.53:5353", "10.0.0.53:5353", ""},
		{"ok/IPv6 address", "2001:db8::53", "[2001:db8::53]:53", ""},
		{"ok/IPv6 address and port", "[2001:db8::53]:53", "[2001:db8::53]:53", ""},
		{"fail/host name", "ns.example.com", "", "want an IP address"},
		{"fail/host name and port", "ns.example.com:53", "", `"ns.example.com" is not an IP address (a resolver must be reachable without DNS)`},
		{"fail/port without host", ":53", "", `"" is not an IP address`},
		{"fail/host name and a port above 65535", "a:99999", "", `"a" is not an IP address`},
		{"fail/port above 65535", "10.0.0.53:99999", "", `"99999" is not a port number`},
		{"fail/port zero", "10.0.0.53:0", "", `"0" is not a port number`},
		{"fail/port by service name", "10.0.0.53:domain", "", `"domain" is not a port number`},
		{"fail/empty", "", "", "want an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolverAddr(tt.in)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("ResolverAddr(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.refusal) {
				t.Fatalf("ResolverAddr(%q) = %q, %v; want a refusal containing %q", tt.in, got, err, tt.refusal)
			}
		})
	}
}

func TestABadArgumentIsAFaultNotAProblem(t *testing.T) {
	v := newValidator(t, Config{Resolvers: []string{"127.0.0.1:53"}})
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"fail/unknown identifier type", func() error { return v.HTTP01(ctx, "email", "a@b.example", testToken, testKeyAuth) }},
		{"fail/ip identifier that is not an address", func() error { return v.TLSALPN01(ctx, acme.IdentifierIP, "example.test", testKeyAuth) }},
		{"fail/dns identifier that is an address", func() error { return v.HTTP01(ctx, acme.IdentifierDNS, "127.0.0.1", testToken, testKeyAuth) }},
		{"fail/wildcard for http-01", func() error { return v.HTTP01(ctx, acme.IdentifierDNS, "*.example.test", testToken, testKeyAuth) }},
		{"fail/token outside base64url", func() error { return v.HTTP01(ctx, acme.IdentifierIP, "127.0.0.1", "../etc", testKeyAuth) }},
		{"fail/wildcard domain for dns-01", func() error { return v.DNS01(ctx, "*.example.test", testKeyAuth) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantFault(t, tt.call()) })
	}
}
