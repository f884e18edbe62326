package validate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// maxCNAMEQueries bounds how many times dns-01 asks again about the target
// of a CNAME that the resolver answered without following.
const maxCNAMEQueries = 8

// ednsSize is the UDP payload size advertised to resolvers (the DNS flag
// day 2020 value, safe from fragmentation).
const ednsSize = 1232

// DNS01 validates a dns-01 challenge (RFC 8555 §8.4): one of the TXT
// records at _acme-challenge.<domain> must be base64url(SHA-256(keyAuth)).
// domain is the identifier without any "*." prefix. CNAMEs are followed.
func (v *Validator) DNS01(ctx context.Context, domain, keyAuth string) error {
	if len(v.resolvers) == 0 {
		return v.resolversErr
	}
	if domain == "" || strings.HasPrefix(domain, "*.") {
		return fmt.Errorf("validate: dns-01 domain %q must be a name without a wildcard label", domain)
	}
	sum := sha256.Sum256([]byte(keyAuth))
	want := base64.RawURLEncoding.EncodeToString(sum[:])
	qname := dns.Fqdn("_acme-challenge." + domain)
	where := strings.TrimSuffix(qname, ".")

	tctx, cancel := v.withTimeout(ctx)
	defer cancel()
	name, seen := qname, 0
	for queries := 0; ; queries++ {
		r, err := v.query(tctx, name, dns.TypeTXT)
		if err != nil {
			return v.dnsFailed(ctx, where, err)
		}
		txts, end := chase(r.Answer, name)
		switch r.Rcode {
		case dns.RcodeSuccess:
		case dns.RcodeNameError:
			return problem.DNSF("no TXT record found at %s%s: the name does not exist (NXDOMAIN)", where, via(end, qname))
		default:
			return problem.DNSF("querying TXT at %s%s: the DNS server answered %s", where, via(end, qname), rcodeName(r.Rcode))
		}
		for _, t := range txts {
			if strings.Join(t.Txt, "") == want {
				return nil
			}
		}
		seen = len(txts)
		if len(txts) > 0 || strings.EqualFold(end, name) {
			name = end
			break
		}
		// The answer ends in a CNAME whose target it says nothing
		// about: ask about the target.
		if queries == maxCNAMEQueries {
			return problem.DNSF("querying TXT at %s: more than %d CNAMEs to follow", where, maxCNAMEQueries)
		}
		name = end
	}
	if seen == 0 {
		return problem.DNSF("no TXT record found at %s%s", where, via(name, qname))
	}
	if seen == 1 {
		return problem.IncorrectResponseF("the TXT record found at %s%s is not the expected value", where, via(name, qname))
	}
	return problem.IncorrectResponseF("none of the %d TXT records found at %s%s is the expected value", seen, where, via(name, qname))
}

func rcodeName(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE %d", rc)
}

// via says which CNAME target a detail is about, if not the name asked.
func via(name, qname string) string {
	if strings.EqualFold(name, qname) {
		return ""
	}
	return " (following a CNAME to " + strings.TrimSuffix(name, ".") + ")"
}

// chase follows the chain of CNAMEs from name through an answer section
// and returns the TXT records at its end and the name it ends at.
func chase(answer []dns.RR, name string) ([]*dns.TXT, string) {
	seen := map[string]bool{}
	for !seen[strings.ToLower(name)] {
		seen[strings.ToLower(name)] = true
		var txts []*dns.TXT
		next := ""
		for _, rr := range answer {
			if !strings.EqualFold(rr.Header().Name, name) {
				continue
			}
			switch rr := rr.(type) {
			case *dns.TXT:
				txts = append(txts, rr)
			case *dns.CNAME:
				next = rr.Target
			}
		}
		if len(txts) > 0 || next == "" {
			return txts, name
		}
		name = next
	}
	return nil, name // a loop of CNAMEs
}

// query asks the resolvers in turn, moving to the next one on a transport
// error. Each resolver gets an equal share of what is left of ctx's time,
// so that a silent first one leaves time for the others.
func (v *Validator) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(ednsSize, false)
	var errs []error
	for i, server := range v.resolvers {
		if ctx.Err() != nil {
			break
		}
		actx, cancel := shareOf(ctx, len(v.resolvers)-i)
		r, err := exchange(actx, m, server)
		cancel()
		if err == nil {
			return r, nil
		}
		errs = append(errs, fmt.Errorf("resolver %s: %w", server, err))
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// shareOf is ctx with a deadline of 1/n of the time left to it.
func shareOf(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || n <= 1 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Until(deadline)/time.Duration(n))
}

// exchange asks one resolver over UDP, and again over TCP if the answer
// was truncated.
func exchange(ctx context.Context, m *dns.Msg, server string) (*dns.Msg, error) {
	r, err := exchangeOver(ctx, "udp", m, server)
	if err != nil || !r.Truncated {
		return r, err
	}
	r, err = exchangeOver(ctx, "tcp", m, server)
	if err != nil {
		return nil, fmt.Errorf("over TCP after a truncated answer: %w", err)
	}
	return r, nil
}

// exchangeOver is one query on one network. miekg/dns takes only the
// deadline from ctx, so a cancellation closes the connection.
func exchangeOver(ctx context.Context, network string, m *dns.Msg, server string) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: time.Until(deadlineOf(ctx))}
	conn, err := c.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return r, err
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(DefaultTimeout)
}

// dnsFailed sorts a failed query. The caller's context ending is a fault
// on this side; a timeout is the client's (its name servers are slow or
// silent, RFC 8555 §8.4's "dns" problem); any other transport error means
// the configured resolvers are unreachable, which is not the client's
// doing either. Resolver addresses stay out of the problem detail.
func (v *Validator) dnsFailed(parent context.Context, where string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("validate: querying TXT at %s: %w", where, perr)
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return problem.DNSF("querying TXT at %s: the DNS query timed out", where)
	}
	return fmt.Errorf("validate: querying TXT at %s: no resolver answered: %w", where, err)
}
