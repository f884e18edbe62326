package validate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// challengeServers runs one handler over http and https on loopback, as a
// client's web server would, and returns their ports.
func challengeServers(t *testing.T) (httpPort, tlsPort int) {
	t.Helper()
	var httpBase, httpsBase string
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/acme-challenge/{token}", func(w http.ResponseWriter, r *http.Request) {
		// The first request names the identifier alone in Host and the
		// project in User-Agent; a 400 makes the test fail otherwise.
		switch r.Host {
		case "127.0.0.1", "example.test", "[::1]":
		default:
			http.Error(w, "bad Host "+r.Host, http.StatusBadRequest)
			return
		}
		if !strings.Contains(r.UserAgent(), "caddy-acme-proxy") {
			http.Error(w, "bad User-Agent", http.StatusBadRequest)
			return
		}
		switch tok := r.PathValue("token"); tok {
		case "ok":
			fmt.Fprint(w, testKeyAuth)
		case "trailing-space":
			fmt.Fprint(w, testKeyAuth+" \r\n\t\n")
		case "leading-space":
			fmt.Fprint(w, " "+testKeyAuth)
		case "wrong":
			fmt.Fprint(w, "SECRET-WRONG-BODY")
		case "server-error":
			http.Error(w, "SECRET-WRONG-BODY", http.StatusInternalServerError)
		case "redirect-relative":
			http.Redirect(w, r, "/final/ok", http.StatusFound)
		case "redirect-http":
			http.Redirect(w, r, httpBase+"/final/ok", http.StatusMovedPermanently)
		case "redirect-https":
			http.Redirect(w, r, httpsBase+"/final/ok", http.StatusFound)
		case "redirect-http-on-tls-port":
			http.Redirect(w, r, "http://127.0.0.1:"+strconv.Itoa(tlsPort)+"/final/ok", http.StatusFound)
		case "redirect-https-on-http-port":
			http.Redirect(w, r, "https://127.0.0.1:"+strconv.Itoa(httpPort)+"/final/ok", http.StatusFound)
		case "redirect-default-port":
			http.Redirect(w, r, "http://127.0.0.1/final/ok", http.StatusFound)
		case "redirect-ftp":
			http.Redirect(w, r, "ftp://127.0.0.1/final/ok", http.StatusFound)
		case "chain-5", "chain-6":
			http.Redirect(w, r, "/chain/"+strings.TrimPrefix(tok, "chain-"), http.StatusFound)
		case "loop":
			http.Redirect(w, r, "/final/loop", http.StatusFound)
		case "huge":
			fmt.Fprint(w, testKeyAuth+strings.Repeat(" ", maxBody))
		case "at-cap":
			fmt.Fprint(w, testKeyAuth+strings.Repeat("\n", maxBody-len(testKeyAuth)))
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			fmt.Fprint(w, testKeyAuth)
		default:
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("/final/ok", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, testKeyAuth) })
	mux.HandleFunc("/final/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final/loop", http.StatusFound)
	})
	// /chain/n redirects n-1 more times, then answers.
	mux.HandleFunc("/chain/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n <= 1 {
			fmt.Fprint(w, testKeyAuth)
			return
		}
		http.Redirect(w, r, "/chain/"+strconv.Itoa(n-1), http.StatusFound)
	})

	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	ts := httptest.NewTLSServer(mux)
	t.Cleanup(ts.Close)
	// Redirects name a host, never an IP address but an IP identifier's
	// own (see checkRedirect).
	httpBase = strings.Replace(hs.URL, "127.0.0.1", "example.test", 1)
	httpsBase = strings.Replace(ts.URL, "127.0.0.1", "example.test", 1)
	return port(t, hs.URL), port(t, ts.URL)
}

func port(t *testing.T, rawURL string) int {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestHTTP01FetchesTheKeyAuthorizationFromTheWellKnownPath(t *testing.T) {
	httpPort, tlsPort := challengeServers(t)
	tests := []struct {
		name      string
		identType string
		ident     string
		token     string
		cfg       func(*Config)
		want      acme.ProblemType
	}{
		{name: "ok/ip identifier", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "ok"},
		{name: "ok/dns identifier", identType: acme.IdentifierDNS, ident: "example.test", token: "ok"},
		{name: "ok/ipv6 identifier in brackets", identType: acme.IdentifierIP, ident: "::1", token: "ok"},
		{name: "ok/trailing whitespace ignored", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "trailing-space"},
		{name: "ok/body of exactly the cap", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "at-cap"},
		{name: "ok/relative redirect", identType: acme.IdentifierDNS, ident: "example.test", token: "redirect-relative"},
		{name: "ok/redirect to http on the HTTP port", identType: acme.IdentifierDNS, ident: "example.test", token: "redirect-http"},
		{name: "ok/redirect to https on the TLS port without verifying its certificate", identType: acme.IdentifierDNS, ident: "example.test", token: "redirect-https"},
		{name: "ok/as many redirects as allowed", identType: acme.IdentifierDNS, ident: "example.test", token: "chain-5"},
		{name: "fail/wrong body", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "wrong", want: acme.ErrorIncorrectResponse},
		{name: "fail/leading whitespace", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "leading-space", want: acme.ErrorIncorrectResponse},
		{name: "fail/404", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "missing", want: acme.ErrorIncorrectResponse},
		{name: "fail/500", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "server-error", want: acme.ErrorIncorrectResponse},
		{name: "fail/oversized body", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "huge", want: acme.ErrorIncorrectResponse},
		{name: "fail/redirect to http on the TLS port", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "redirect-http-on-tls-port", want: acme.ErrorConnection},
		{name: "fail/redirect to https on the HTTP port", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "redirect-https-on-http-port", want: acme.ErrorConnection},
		{name: "fail/redirect to the default port when another is configured", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "redirect-default-port", want: acme.ErrorConnection},
		{name: "fail/redirect to another scheme", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "redirect-ftp", want: acme.ErrorConnection},
		{name: "fail/one redirect too many", identType: acme.IdentifierDNS, ident: "example.test", token: "chain-6", want: acme.ErrorConnection},
		{name: "fail/redirect loop", identType: acme.IdentifierDNS, ident: "example.test", token: "loop", want: acme.ErrorConnection},
		{name: "fail/unknown name", identType: acme.IdentifierDNS, ident: "unknown.test", token: "ok", want: acme.ErrorDNS},
		{
			name: "fail/connection refused", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "ok", want: acme.ErrorConnection,
			cfg: func(c *Config) { c.HTTPPort = freePort(t) },
		},
		{
			name: "fail/timeout", identType: acme.IdentifierIP, ident: "127.0.0.1", token: "slow", want: acme.ErrorConnection,
			cfg: func(c *Config) { c.Timeout = 200 * time.Millisecond },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{
				HTTPPort: httpPort,
				TLSPort:  tlsPort,
				Timeout:  5 * time.Second,
				Dial:     loopbackDial("127.0.0.1", "::1", "example.test"),
			}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			v := newValidator(t, cfg)
			err := v.HTTP01(context.Background(), tt.identType, tt.ident, tt.token, testKeyAuth)
			if p := wantOutcome(t, err, tt.want); p != nil && strings.Contains(p.Detail, "SECRET") {
				t.Errorf("detail echoes the body: %s", p.Detail)
			}
		})
	}
}

func TestHTTP01WithoutADialHookConnectsDirectly(t *testing.T) {
	httpPort, _ := challengeServers(t)
	v := newValidator(t, Config{HTTPPort: httpPort})
	wantOutcome(t, v.HTTP01(context.Background(), acme.IdentifierIP, "127.0.0.1", "ok", testKeyAuth), "")
}

// proxyChild marks the process in which
// TestHTTP01IgnoresTheProxyOfTheEnvironment validates under a proxy.
const proxyChild = "ACMEPROXY_VALIDATE_PROXY_CHILD"

// The validator must fetch from the client's server itself, never
// through a proxy named by the environment: a proxy would see (and could
// answer) the challenge. Go never proxies a loopback address, and reads
// the proxy variables once per process, so the check runs in a child
// process started with HTTP_PROXY set, and validates a name that its
// own resolver maps to loopback. The proxy, here, counts what it is sent.
func TestHTTP01IgnoresTheProxyOfTheEnvironment(t *testing.T) {
	if os.Getenv(proxyChild) == "1" {
		validateUnderAProxy(t)
		return
	}
	var proxied atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		http.Error(w, "the proxy answered", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)

	const name = "TestHTTP01IgnoresTheProxyOfTheEnvironment"
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1", "-test.timeout=60s")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "REQUEST_METHOD", proxyChild:
			// REQUEST_METHOD makes Go ignore HTTP_PROXY (CGI).
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, proxyChild+"=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("the validation under HTTP_PROXY=%s failed (%v):\n%s", proxy.URL, err, out)
	} else if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Errorf("the child process did not run the test:\n%s", out)
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy of the environment was sent %d requests; want none", n)
	}
}

// validateUnderAProxy runs in the child: HTTP_PROXY names the parent's
// proxy, and a transport that honoured it would send this request there.
func validateUnderAProxy(t *testing.T) {
	httpPort, tlsPort := challengeServers(t)
	v := newValidator(t, Config{HTTPPort: httpPort, TLSPort: tlsPort, Resolvers: []string{startDNS(t, loopbackZone{})}})
	req, err := http.NewRequest(http.MethodGet, "http://example.test:"+strconv.Itoa(httpPort)+"/.well-known/acme-challenge/ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := http.ProxyFromEnvironment(req); err != nil || u == nil {
		t.Fatalf("the environment would not proxy %s (proxy %v, %v), so this test proves nothing", req.URL, u, err)
	}
	wantOutcome(t, v.HTTP01(context.Background(), acme.IdentifierDNS, "example.test", "ok", testKeyAuth), "")
}

func TestHTTP01WithACancelledCallerIsAFaultNotAProblem(t *testing.T) {
	httpPort, _ := challengeServers(t)
	v := newValidator(t, Config{HTTPPort: httpPort})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	wantFault(t, v.HTTP01(ctx, acme.IdentifierIP, "127.0.0.1", "slow", testKeyAuth))
}

// loopbackZone answers A queries for example.test with 127.0.0.1, as an
// operator's split-horizon resolver would for an internal name.
type loopbackZone struct{}

func (loopbackZone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	if q.Qtype == dns.TypeA && strings.EqualFold(q.Name, "example.test.") {
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)}}
	}
	_ = w.WriteMsg(m)
}

func TestHTTP01ResolvesNamesThroughTheConfiguredResolvers(t *testing.T) {
	httpPort, tlsPort := challengeServers(t)
	v := newValidator(t, Config{HTTPPort: httpPort, TLSPort: tlsPort, Resolvers: []string{startDNS(t, loopbackZone{})}})
	if err := v.HTTP01(context.Background(), acme.IdentifierDNS, "example.test", "ok", testKeyAuth); err != nil {
		t.Fatalf("http-01 for a name only the configured resolver knows: %v", err)
	}
}

// The address lookups of http-01 and tls-alpn-01 sort their failures as
// dns-01 and CAA do: what a resolver answers about the client's name (no
// such name, SERVFAIL) or its silence is the client's dns problem; no
// configured resolver reachable at all is a fault on this side, which the
// validation job retries, never a verdict that fails the challenge.
func TestAnAddressLookupThatNoResolverAnswersIsAFaultNotAProblem(t *testing.T) {
	zone, err := testdns.Start("zone.test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zone.Close)
	zone.SetRcode("servfail.zone.test", dns.RcodeServerFailure)
	tests := []struct {
		name     string
		resolver func(t *testing.T) string
		host     string
		timeout  time.Duration
		want     acme.ProblemType // "" for a fault
	}{
		{name: "fault/the only resolver refuses the connection", resolver: closedResolver, host: "www.zone.test"},
		{name: "fault/every resolver refuses the connection", host: "www.zone.test",
			resolver: func(t *testing.T) string { return closedResolver(t) + "," + closedResolver(t) }},
		{name: "fail/the resolver answers SERVFAIL", host: "servfail.zone.test", want: acme.ErrorDNS},
		{name: "fail/the resolver answers NXDOMAIN", host: "nowhere.test", want: acme.ErrorDNS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolvers := []string{zone.Addr}
			if tt.resolver != nil {
				resolvers = strings.Split(tt.resolver(t), ",")
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			// Nothing listens on port 1: a lookup that succeeded would end
			// in a connection problem, not in what is checked here.
			v := newValidator(t, Config{HTTPPort: 1, TLSPort: 1, Timeout: timeout, Resolvers: resolvers})
			for method, validate := range map[string]func() error{
				"http-01":     func() error { return v.HTTP01(context.Background(), acme.IdentifierDNS, tt.host, "ok", testKeyAuth) },
				"tls-alpn-01": func() error { return v.TLSALPN01(context.Background(), acme.IdentifierDNS, tt.host, testKeyAuth) },
			} {
				t.Run(method, func(t *testing.T) {
					if tt.want == "" {
						wantFault(t, validate())
						return
					}
					wantOutcome(t, validate(), tt.want)
				})
			}
		})
	}
}

// The configured resolvers are tried in order for the address lookups of
// http-01 and tls-alpn-01 as for dns-01: the next one is asked after one
// that cannot be reached or stays silent, never after one that answered.
func TestAddressLookupsAskTheNextResolverAfterOneThatDoesNotAnswer(t *testing.T) {
	httpPort, _ := challengeServers(t)
	tlsPort := alpnServer(t, "example.test", acmeCert(t, []string{"example.test"}, nil, nil, acmeExtension(t, testKeyAuth, true)), nil)
	good := startDNS(t, loopbackZone{})
	nx, err := testdns.Start("other.test") // example.test is NXDOMAIN there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nx.Close)
	servfail, err := testdns.Start("example.test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(servfail.Close)
	servfail.SetRcode("example.test", dns.RcodeServerFailure)
	tests := []struct {
		name      string
		resolvers func(t *testing.T) []string
		want      acme.ProblemType
	}{
		{name: "ok/one resolver that answers", resolvers: func(t *testing.T) []string { return []string{good} }},
		{name: "ok/a refusing resolver, then one that answers", resolvers: func(t *testing.T) []string { return []string{closedResolver(t), good} }},
		{name: "ok/a silent resolver, then one that answers", resolvers: func(t *testing.T) []string { return []string{silentResolver(t), good} }},
		{name: "ok/two refusing resolvers, then one that answers", resolvers: func(t *testing.T) []string { return []string{closedResolver(t), closedResolver(t), good} }},
		{name: "fail/NXDOMAIN is an answer: the next resolver is not asked", want: acme.ErrorDNS,
			resolvers: func(t *testing.T) []string { return []string{nx.Addr, good} }},
		{name: "fail/SERVFAIL is an answer: the next resolver is not asked", want: acme.ErrorDNS,
			resolvers: func(t *testing.T) []string { return []string{servfail.Addr, good} }},
		{name: "fail/a refusing resolver, then one answering SERVFAIL", want: acme.ErrorDNS,
			resolvers: func(t *testing.T) []string { return []string{closedResolver(t), servfail.Addr} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newValidator(t, Config{HTTPPort: httpPort, TLSPort: tlsPort, Timeout: 4 * time.Second, Resolvers: tt.resolvers(t)})
			for method, validate := range map[string]func() error{
				"http-01": func() error {
					return v.HTTP01(context.Background(), acme.IdentifierDNS, "example.test", "ok", testKeyAuth)
				},
				"tls-alpn-01": func() error {
					return v.TLSALPN01(context.Background(), acme.IdentifierDNS, "example.test", testKeyAuth)
				},
			} {
				t.Run(method, func(t *testing.T) { wantOutcome(t, validate(), tt.want) })
			}
		})
	}
}
