package validate

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Validation connects where a client tells it to: the address its
// identifier resolves to, and for http-01 wherever a redirect points. The
// checks below run in the dialer, on the address about to be connected to
// after any DNS lookup, so that neither a DNS answer nor a name that
// changes its answer between two lookups (rebinding) gets past them.

// limitedBroadcast is 255.255.255.255 (RFC 919).
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// NeverDialled names the class of ip if validation must never connect to
// it, whoever asks (so an IP identifier of that class can never be
// validated): link-local addresses (169.254.0.0/16, where cloud
// metadata services live, and fe80::/10), unspecified ones (0.0.0.0/8,
// "this network", which Linux connects to the local host, and ::),
// multicast and the limited broadcast address. ip is unmapped first, so
// that ::ffff:169.254.169.254 is link-local too.
func NeverDialled(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsUnspecified() || ip.Is4() && ip.As4()[0] == 0:
		return "an unspecified address"
	case ip.IsMulticast():
		return "a multicast address"
	case ip == limitedBroadcast:
		return "the broadcast address"
	}
	return ""
}

// refusedAddressError is a connection the dialer refused to open.
type refusedAddressError struct {
	addr string // the address as the dialer had it
	why  string
}

func (e *refusedAddressError) Error() string {
	return fmt.Sprintf("validation does not connect to %s, %s", e.addr, e.why)
}

// identHostKey carries, in the context of a validation, the host of the
// identifier being validated (see withIdentHost).
type identHostKey struct{}

// loopbackOKKey carries, in the context of one dial, whether that dial is
// for the identifier's own host, which alone may be on loopback.
type loopbackOKKey struct{}

// deadlineKey carries, in the context of a validation, its deadline, for
// the dials net/http makes with a context that keeps the request's values
// but not its deadline.
type deadlineKey struct{}

// withIdentHost marks ctx as the validation of the identifier whose host
// (a name, or an address in canonical form) is host.
func withIdentHost(ctx context.Context, host string) context.Context {
	if d, ok := ctx.Deadline(); ok {
		ctx = context.WithValue(ctx, deadlineKey{}, d)
	}
	return context.WithValue(ctx, identHostKey{}, host)
}

// guardedDial returns d's DialContext with the address checks of
// checkDialAddress, for a Validator without a Dial hook. A name is
// resolved (one of several labels as a fully qualified one) by lookup if
// it is set (each address it returns is then dialled in turn, with an
// equal share of the time left), else by d.
//
// A loopback address is reached only for the identifier's own host: an
// operator may validate a name or an address of this very machine, but a
// redirect to another name must not turn validation against it. A
// redirect to the identifier's own host (a relative one, or http to
// https) is a connection to that same host and may reach loopback too.
func guardedDial(d *net.Dialer, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	d.ControlContext = checkDialAddress
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("validate: dial %q: %w", address, err)
		}
		ident, _ := ctx.Value(identHostKey{}).(string)
		ctx = context.WithValue(ctx, loopbackOKKey{}, ident != "" && sameHost(ident, host))
		if d, ok := ctx.Value(deadlineKey{}).(time.Time); ok {
			// net/http dials with the request's values but without its
			// deadline (it cancels the dial when the request ends): the
			// resolvers' shares of the time are shares of this one.
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d)
			defer cancel()
		}
		if _, err := netip.ParseAddr(host); err == nil {
			return d.DialContext(ctx, network, address)
		}
		// Rooted: a name of several labels to validate (or a redirect's)
		// is fully qualified, never tried under the machine's search
		// domains first (ndots:5 in Kubernetes), where a name someone
		// else holds would answer in its place; /etc/hosts still answers
		// it. A single label is left as it is: it resolves, if at all,
		// as this machine resolves it — /etc/hosts (where Go's resolver
		// matches it only unrooted) or a search domain.
		if strings.Contains(strings.TrimSuffix(host, "."), ".") {
			host = dns.Fqdn(host)
		}
		if lookup == nil {
			return d.DialContext(ctx, network, net.JoinHostPort(host, port))
		}
		addrs, err := lookup(ctx, host)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		var first error
		for i, a := range addrs {
			actx, cancel := shareOf(ctx, len(addrs)-i)
			c, err := d.DialContext(actx, network, net.JoinHostPort(a.String(), port))
			cancel()
			if err == nil {
				return c, nil
			}
			if first == nil {
				first = err
			}
		}
		if first == nil {
			first = &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no address", Name: host, IsNotFound: true}}
		}
		return nil, first
	}
}

// sameHost reports whether a and b name the same host: equal addresses,
// or names equal but for case and a trailing dot.
func sameHost(a, b string) bool {
	if ia, err := netip.ParseAddr(a); err == nil {
		ib, err := netip.ParseAddr(b)
		return err == nil && ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// checkDialAddress is the Control function of the validation dialer: it
// sees the resolved "ip:port" of every connection before it is opened, and
// refuses an address validation never connects to, or a loopback address
// for any host other than the identifier's own.
func checkDialAddress(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedAddressError{addr: address, why: "not an IP address and port"}
	}
	ip := ap.Addr().Unmap()
	if why := NeverDialled(ip); why != "" {
		return &refusedAddressError{addr: ip.String(), why: why}
	}
	if ip.IsLoopback() {
		if ok, _ := ctx.Value(loopbackOKKey{}).(bool); !ok {
			return &refusedAddressError{addr: ip.String(), why: "a loopback address, reached only for an identifier that is there itself, never through a redirect to another host"}
		}
	}
	return nil
}
