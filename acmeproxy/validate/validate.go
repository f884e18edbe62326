// Package validate checks ACME challenges for real: the server side of
// http-01 (RFC 8555 §8.3), dns-01 (RFC 8555 §8.4) and tls-alpn-01
// (RFC 8737), for DNS names and, where RFC 8738 allows it, IP addresses.
//
// Every check answers in one of three ways:
//
//   - nil: the challenge is valid;
//   - a *problem.Problem: the client's failure, to be recorded on the
//     challenge (its detail helps the client and never echoes what the
//     client's server sent);
//   - any other error: a fault on this side (no resolver, the caller's
//     context ended, a bad argument) that the caller may retry.
package validate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// Defaults for the zero values of Config.
const (
	DefaultHTTPPort     = 80
	DefaultTLSPort      = 443
	DefaultTimeout      = 10 * time.Second
	DefaultMaxRedirects = 5
)

// userAgent names the project on every http-01 request, so that the
// operator of a web server can tell who is fetching the challenge.
const userAgent = "Mozilla/5.0 (compatible; caddy-acme-proxy validation; +https://github.com/acmeproxy/caddy-acme-proxy)"

// resolvConf is where the default DNS resolvers come from.
const resolvConf = "/etc/resolv.conf"

// Config configures a Validator. Its zero value is a sound default.
type Config struct {
	// HTTPPort is the port http-01 connects to (RFC 8555 §8.3: "port
	// 80"); redirects may only go to http on this port. Default 80.
	HTTPPort int
	// TLSPort is the port tls-alpn-01 connects to (RFC 8737 §3: "port
	// 443"); http-01 redirects may only go to https on this port.
	// Default 443.
	TLSPort int
	// Resolvers are the DNS servers dns-01 asks, tried in order: IP
	// addresses, with a port or without one (port 53); see ResolverAddr. Default: the
	// nameservers of /etc/resolv.conf. When set, http-01 and tls-alpn-01
	// resolve names through them too, in the same order (unless Dial is
	// set); when not, they use the system resolver.
	Resolvers []string
	// Timeout bounds one validation from start to end. Default 10s.
	Timeout time.Duration
	// MaxRedirects is how many redirects http-01 follows. Default 5.
	MaxRedirects int
	// RedirectPolicy, if set, is asked about the host of every redirect
	// http-01 would follow, a DNS name (a redirect to an IP address is
	// refused whatever the policy): an error refuses the redirect, its
	// text going into the problem's detail. It is meant to be the
	// profile's identifier policy, so that a redirect reaches no host the
	// profile would not issue for.
	RedirectPolicy func(host string) error
	// Dial, if set, opens the connections of http-01 and tls-alpn-01
	// instead of a net.Dialer. address is "host:port", host being the
	// identifier or a redirect's host. It lets a deployment route
	// validation through a fixed path, and tests reach loopback. It
	// replaces the dialer's address checks too (no link-local,
	// unspecified, multicast or broadcast address; loopback only for the
	// identifier's own host): where it connects is its own answer. The
	// rules on redirects still apply.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Validator checks challenges. It is safe for concurrent use.
type Validator struct {
	httpPort     int
	tlsPort      int
	resolvers    []string
	resolversErr error // why there are no resolvers, if there are none
	timeout      time.Duration
	maxRedirects int
	redirectOK   func(host string) error // nil: any name
	dial         func(ctx context.Context, network, address string) (net.Conn, error)
	httpClient   *http.Client
}

// New checks cfg, fills in its defaults and returns a Validator. An
// error names the field at fault.
func New(cfg Config) (*Validator, error) {
	v := &Validator{
		httpPort:     cfg.HTTPPort,
		tlsPort:      cfg.TLSPort,
		timeout:      cfg.Timeout,
		maxRedirects: cfg.MaxRedirects,
		redirectOK:   cfg.RedirectPolicy,
		dial:         cfg.Dial,
	}
	if v.httpPort == 0 {
		v.httpPort = DefaultHTTPPort
	}
	if v.tlsPort == 0 {
		v.tlsPort = DefaultTLSPort
	}
	if v.timeout == 0 {
		v.timeout = DefaultTimeout
	}
	if v.maxRedirects == 0 {
		v.maxRedirects = DefaultMaxRedirects
	}
	switch {
	case v.httpPort < 0 || v.httpPort > 65535:
		return nil, fmt.Errorf("validate: HTTPPort %d is not a port number", cfg.HTTPPort)
	case v.tlsPort < 0 || v.tlsPort > 65535:
		return nil, fmt.Errorf("validate: TLSPort %d is not a port number", cfg.TLSPort)
	case v.timeout < 0:
		return nil, fmt.Errorf("validate: Timeout %s is negative", cfg.Timeout)
	case v.maxRedirects < 0:
		return nil, fmt.Errorf("validate: MaxRedirects %d is negative", cfg.MaxRedirects)
	}
	for i, r := range cfg.Resolvers {
		addr, err := ResolverAddr(r)
		if err != nil {
			return nil, fmt.Errorf("validate: Resolvers[%d] %q: %w", i, r, err)
		}
		v.resolvers = append(v.resolvers, addr)
	}
	if len(v.resolvers) == 0 {
		// Not fatal: a profile may offer http-01 and tls-alpn-01 only.
		// DNS01 reports the cause.
		v.resolvers, v.resolversErr = systemResolvers()
	}
	if v.dial == nil {
		var lookup func(ctx context.Context, host string) ([]netip.Addr, error)
		if len(cfg.Resolvers) > 0 {
			// An operator who names resolvers means them for every lookup
			// validation makes, as Boulder does: a split-horizon name must
			// resolve the same way for http-01 and tls-alpn-01 as for dns-01.
			lookup = v.lookupAddrs
		}
		v.dial = guardedDial(&net.Dialer{}, lookup)
	}
	v.httpClient = newHTTPClient(v)
	return v, nil
}

// ResolverAddr checks the address of a DNS server to ask, and returns it
// as "ip:port": an IP address, with a port or without one (port 53), as
// in "10.0.0.53", "10.0.0.53:5353", "2001:db8::53" or "[2001:db8::53]:53".
// A host name is refused: a resolver must be reachable without DNS. The
// error does not repeat s; the caller names the key and the value.
func ResolverAddr(s string) (string, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return net.JoinHostPort(ip.String(), "53"), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", errors.New(`want an IP address, with an optional port ("10.0.0.53", "[2001:db8::53]:53")`)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("%q is not an IP address (a resolver must be reachable without DNS)", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q is not a port number", port)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(n)), nil
}

func systemResolvers() ([]string, error) {
	cc, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("validate: no Resolvers configured and %s is unreadable: %w", resolvConf, err)
	}
	var out []string
	for _, s := range cc.Servers {
		out = append(out, net.JoinHostPort(s, cc.Port))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("validate: no Resolvers configured and %s lists no nameserver", resolvConf)
	}
	return out, nil
}

// withTimeout bounds one validation by the configured timeout.
func (v *Validator) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, v.timeout)
}

// hostOf checks an identifier and returns the host to connect to: the
// name as it is, or the address in canonical form.
func hostOf(identType, identValue string) (string, netip.Addr, error) {
	switch identType {
	case acme.IdentifierDNS:
		if identValue == "" {
			return "", netip.Addr{}, errors.New("validate: empty dns identifier")
		}
		if strings.HasPrefix(identValue, "*.") {
			return "", netip.Addr{}, fmt.Errorf("validate: wildcard %q validates by dns-01 only", identValue)
		}
		if _, err := netip.ParseAddr(identValue); err == nil {
			return "", netip.Addr{}, fmt.Errorf("validate: dns identifier %q is an IP address", identValue)
		}
		return identValue, netip.Addr{}, nil
	case acme.IdentifierIP:
		ip, err := netip.ParseAddr(identValue)
		if err != nil || ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("validate: ip identifier %q is not an IP address", identValue)
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	default:
		return "", netip.Addr{}, fmt.Errorf("validate: unknown identifier type %q", identType)
	}
}

// failed turns an error met while talking to the client's server into the
// answer the caller expects. If the caller's own context ended, that is
// not the client's failure: the error is returned as it is, to be retried.
// A problem already built is returned unchanged. Otherwise the error is
// described for the client as a connection (or DNS) problem, prefixed by
// what was being done.
func (v *Validator) failed(parent context.Context, what string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("validate: %s: %w", what, perr)
	}
	if p, ok := problem.As(err); ok {
		return p
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		// Looked up rooted (see guardedDial); named as the client wrote it.
		name := strings.TrimSuffix(dnsErr.Name, ".")
		if dnsErr.IsNotFound {
			return problem.DNSF("%s: no address found for %s", what, name)
		}
		if dnsErr.IsTimeout {
			return problem.DNSF("%s: timeout looking up %s", what, name)
		}
		if noResolverAnswered(dnsErr) {
			// As for dns-01 and CAA: the resolvers are this side's.
			return fmt.Errorf("validate: %s: looking up %s: no resolver answered: %w", what, name, err)
		}
		return problem.DNSF("%s: looking up %s failed: %s", what, name, dnsErr.Err)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return problem.ConnectionF("%s: timed out after %s", what, v.timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return problem.ConnectionF("%s: connection refused", what)
	case errors.Is(err, syscall.ECONNRESET):
		return problem.ConnectionF("%s: connection reset by the server", what)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return problem.ConnectionF("%s: the server closed the connection", what)
	}
	return problem.ConnectionF("%s: %s", what, netCause(err))
}

// servfail is the text of the error Go's resolver reports for a SERVFAIL
// answer (net's errServerTemporarilyMisbehaving), the one temporary
// failure that is an answer.
const servfail = "server misbehaving"

// noResolverAnswered reports whether a failed address lookup failed
// because no resolver could be reached (a socket error: refused,
// unreachable, reset), not because of what a resolver answered about the
// client's name. Go's resolver marks socket errors temporary, and
// SERVFAIL too, which alone is an answer.
func noResolverAnswered(e *net.DNSError) bool {
	return e.IsTemporary && !e.IsTimeout && !e.IsNotFound && e.Err != servfail
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// netCause strips the layers that repeat what the detail already says:
// the URL of a *url.Error, the operation and addresses of a *net.OpError.
func netCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	return err
}

// lookupAddrs resolves host for http-01 and tls-alpn-01 through the
// configured DNS servers, as dns-01 queries them: in order, each with an
// equal share of the time left, moving to the next one only when one
// could not be reached or stayed silent (an answer, even NXDOMAIN or
// SERVFAIL, is final). A Go resolver given all of them at once would not
// do that: it asks the servers of /etc/resolv.conf, and a Dial hook cannot
// tell a server that does not answer a UDP query from one that does. If
// none answered, the error is a timeout if any of them stayed silent.
func (v *Validator) lookupAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	var timedOut, last error
	for i, server := range v.resolvers {
		if ctx.Err() != nil {
			break
		}
		r := &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, server)
			},
		}
		actx, cancel := shareOf(ctx, len(v.resolvers)-i)
		addrs, err := r.LookupNetIP(actx, "ip", host)
		cancel()
		if err == nil {
			for j, a := range addrs {
				addrs[j] = a.Unmap()
			}
			return addrs, nil
		}
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsTimeout && !noResolverAnswered(dnsErr) {
			return nil, err
		}
		if dnsErr.IsTimeout && timedOut == nil {
			timedOut = err
		}
		last = err
	}
	if timedOut != nil {
		return nil, timedOut
	}
	if last == nil {
		return nil, ctx.Err()
	}
	return nil, last
}
