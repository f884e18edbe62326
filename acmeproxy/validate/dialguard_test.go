package validate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// guardZone is the zone of the test DNS server of the dialer tests: every
// name in it resolves to 127.0.0.1 unless a test gives it other addresses.
const guardZone = "example.test"

// guardSite is a client's web server on 127.0.0.1 for the dialer tests:
// it answers the key authorization for token "ok" and at /final, and
// redirects the tokens a test registers.
type guardSite struct {
	port int

	mu        sync.Mutex
	redirects map[string]string // token → Location
}

func startGuardSite(t *testing.T) *guardSite {
	t.Helper()
	s := &guardSite{redirects: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/acme-challenge/{token}", func(w http.ResponseWriter, r *http.Request) {
		tok := r.PathValue("token")
		s.mu.Lock()
		loc, ok := s.redirects[tok]
		s.mu.Unlock()
		switch {
		case ok:
			http.Redirect(w, r, loc, http.StatusFound)
		case tok == "ok":
			fmt.Fprint(w, testKeyAuth)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, testKeyAuth) })
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	s.port = port(t, hs.URL)
	return s
}

// redirect makes token redirect to http://host:<the site's port>/final
// and returns the token.
func (s *guardSite) redirect(token, host string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.redirects[token] = "http://" + net.JoinHostPort(host, fmt.Sprint(s.port)) + "/final"
	return token
}

func startGuardDNS(t *testing.T) *testdns.Server {
	t.Helper()
	d, err := testdns.Start(guardZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// wantRefusedAddress checks that err is a connection problem saying the
// dialer refused addr as what.
func wantRefusedAddress(t *testing.T, err error, addr, what string) {
	t.Helper()
	p := wantOutcome(t, err, acme.ErrorConnection)
	if want := "validation does not connect to " + addr + ", " + what; !strings.Contains(p.Detail, want) {
		t.Errorf("detail %q does not say %q", p.Detail, want)
	}
}

// Each address class is reached four ways, none of which may connect: an
// http-01 identifier that is the address, an http-01 identifier whose name
// resolves to it, an http-01 redirect to a name that resolves to it, and a
// tls-alpn-01 identifier whose name resolves to it. The names are answered
// by a DNS server, so it is the dialer that refuses them, not a look at
// the URL.
func TestValidationNeverConnectsToLinkLocalUnspecifiedMulticastOrBroadcastAddresses(t *testing.T) {
	d := startGuardDNS(t)
	site := startGuardSite(t)
	tests := []struct {
		name  string
		addr  string // as DNS answers it and as an ip identifier
		shown string // as the detail names it: unmapped
		what  string
	}{
		{"link-local IPv4 (cloud metadata)", "169.254.169.254", "169.254.169.254", "a link-local address"},
		{"link-local IPv6", "fe80::1", "fe80::1", "a link-local address"},
		{"IPv4-mapped link-local", "::ffff:169.254.169.254", "169.254.169.254", "a link-local address"},
		{"unspecified IPv4", "0.0.0.0", "0.0.0.0", "an unspecified address"},
		{"IPv4 this-network range", "0.1.2.3", "0.1.2.3", "an unspecified address"},
		{"unspecified IPv6", "::", "::", "an unspecified address"},
		{"IPv4-mapped unspecified", "::ffff:0.0.0.0", "0.0.0.0", "an unspecified address"},
		{"multicast IPv4", "224.0.0.1", "224.0.0.1", "a multicast address"},
		{"multicast IPv6", "ff02::1", "ff02::1", "a multicast address"},
		{"limited broadcast", "255.255.255.255", "255.255.255.255", "the broadcast address"},
	}
	for i, tt := range tests {
		name := fmt.Sprintf("class%d.%s", i, guardZone)
		d.SetAddrs(name, netip.MustParseAddr(tt.addr))
		v := newValidator(t, Config{HTTPPort: site.port, TLSPort: site.port, Timeout: 5 * time.Second, Resolvers: []string{d.Addr}})
		ctx := context.Background()
		t.Run("fail/"+tt.name+"/http-01 ip identifier", func(t *testing.T) {
			wantRefusedAddress(t, v.HTTP01(ctx, acme.IdentifierIP, tt.addr, "ok", testKeyAuth), tt.shown, tt.what)
		})
		t.Run("fail/"+tt.name+"/http-01 name resolving there", func(t *testing.T) {
			wantRefusedAddress(t, v.HTTP01(ctx, acme.IdentifierDNS, name, "ok", testKeyAuth), tt.shown, tt.what)
		})
		t.Run("fail/"+tt.name+"/http-01 redirect to a name resolving there", func(t *testing.T) {
			tok := site.redirect(fmt.Sprintf("to-class%d", i), name)
			wantRefusedAddress(t, v.HTTP01(ctx, acme.IdentifierDNS, guardZone, tok, testKeyAuth), tt.shown, tt.what)
		})
		t.Run("fail/"+tt.name+"/tls-alpn-01 name resolving there", func(t *testing.T) {
			wantRefusedAddress(t, v.TLSALPN01(ctx, acme.IdentifierDNS, name, testKeyAuth), tt.shown, tt.what)
		})
	}
}

// An operator may validate a name or an address of this very machine, so
// loopback is reached for the identifier's own host, a redirect to that
// same host included; a redirect to any other host that resolves to
// loopback is refused, so that a client cannot aim validation at the
// services of the machine it runs on.
func TestLoopbackIsReachedForTheIdentifierItselfNeverThroughARedirectElsewhere(t *testing.T) {
	d := startGuardDNS(t)
	site := startGuardSite(t)
	d.SetAddrs("v6loopback."+guardZone, netip.MustParseAddr("::1"))
	d.SetAddrs("mappedloopback."+guardZone, netip.MustParseAddr("::ffff:127.0.0.1"))
	d.SetAddrs("otherloopback."+guardZone, netip.MustParseAddr("127.0.0.2"))
	v := newValidator(t, Config{HTTPPort: site.port, Timeout: 5 * time.Second, Resolvers: []string{d.Addr}})
	ctx := context.Background()

	tests := []struct {
		name      string
		identType string
		ident     string
		token     string
		refused   string // "": valid; else the loopback address the dialer refuses
	}{
		{name: "ok/ip identifier on loopback", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "ok"},
		{name: "ok/dns identifier resolving to loopback", identType: acme.IdentifierDNS, ident: guardZone, token: "ok"},
		{name: "ok/dns identifier in another case", identType: acme.IdentifierDNS, ident: "EXAMPLE.test", token: "ok"},
		{name: "ok/redirect to the identifier's own host", identType: acme.IdentifierDNS, ident: guardZone, token: site.redirect("to-self", guardZone)},
		{name: "ok/redirect to the identifier's own host in another case", identType: acme.IdentifierDNS, ident: guardZone, token: site.redirect("to-self-case", "Example.TEST")},
		{name: "ok/redirect to the identifier's own host with a trailing dot", identType: acme.IdentifierDNS, ident: guardZone, token: site.redirect("to-self-dot", guardZone+".")},
		{name: "fail/redirect to another name resolving to 127.0.0.1", identType: acme.IdentifierDNS, ident: guardZone,
			token: site.redirect("to-other", "www."+guardZone), refused: "127.0.0.1"},
		{name: "fail/redirect from an ip identifier to a name resolving to it", identType: acme.IdentifierIP, ident: "127.0.0.1",
			token: site.redirect("ip-to-name", "www."+guardZone), refused: "127.0.0.1"},
		{name: "fail/redirect to a name resolving to another loopback address", identType: acme.IdentifierDNS, ident: guardZone,
			token: site.redirect("to-127-0-0-2", "otherloopback."+guardZone), refused: "127.0.0.2"},
		{name: "fail/redirect to a name resolving to ::1", identType: acme.IdentifierDNS, ident: guardZone,
			token: site.redirect("to-v6", "v6loopback."+guardZone), refused: "::1"},
		{name: "fail/redirect to a name resolving to IPv4-mapped loopback", identType: acme.IdentifierDNS, ident: guardZone,
			token: site.redirect("to-mapped", "mappedloopback."+guardZone), refused: "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.HTTP01(ctx, tt.identType, tt.ident, tt.token, testKeyAuth)
			if tt.refused == "" {
				wantOutcome(t, err, "")
				return
			}
			wantRefusedAddress(t, err, tt.refused, "a loopback address")
		})
	}

	t.Run("ok/tls-alpn-01 identifier resolving to loopback", func(t *testing.T) {
		cert := acmeCert(t, []string{guardZone}, nil, nil, acmeExtension(t, testKeyAuth, true))
		tv := newValidator(t, Config{TLSPort: alpnServer(t, guardZone, cert, nil), Timeout: 5 * time.Second, Resolvers: []string{d.Addr}})
		wantOutcome(t, tv.TLSALPN01(ctx, acme.IdentifierDNS, guardZone, testKeyAuth), "")
	})
}

// A dial that carries no identifier at all (nothing but HTTP01 and
// TLSALPN01 dials) reaches no loopback address either.
func TestTheGuardedDialerRefusesLoopbackWithoutAnIdentifier(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	v := newValidator(t, Config{})
	conn, err := v.dial(context.Background(), "tcp", ln.Addr().String())
	if err == nil {
		conn.Close()
		t.Fatal("dialled loopback for no identifier")
	}
	if !strings.Contains(err.Error(), "a loopback address") {
		t.Errorf("got %v, want the loopback refusal", err)
	}
}

// The dialer's check unmaps an IPv4-mapped address however it is handed
// one: the Go dialer passes a mapped answer on as IPv4, but the check
// does not count on it.
func TestTheDialCheckUnmapsAnIPv4MappedAddress(t *testing.T) {
	tests := []struct {
		name    string
		address string
		what    string
	}{
		{"fail/mapped link-local", "[::ffff:169.254.169.254]:80", "a link-local address"},
		{"fail/mapped unspecified", "[::ffff:0.0.0.0]:80", "an unspecified address"},
		{"fail/mapped multicast", "[::ffff:224.0.0.1]:80", "a multicast address"},
		{"fail/mapped broadcast", "[::ffff:255.255.255.255]:80", "the broadcast address"},
		{"fail/mapped loopback for no identifier", "[::ffff:127.0.0.1]:80", "a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDialAddress(context.Background(), "tcp6", tt.address, nil)
			if err == nil || !strings.Contains(err.Error(), ", "+tt.what) {
				t.Fatalf("got %v, want %s refused", err, tt.what)
			}
		})
	}
	if err := checkDialAddress(context.Background(), "tcp6", "[::ffff:192.0.2.1]:80", nil); err != nil {
		t.Errorf("a mapped public address refused: %v", err)
	}
}
