// Package testdns runs a small authoritative DNS server on loopback for
// tests, in the spirit of net/http/httptest: it exists only so that the
// e2e, relay and benchmark tests resolve their names the same way, and no
// production package imports it.
//
// For its zone it answers A 127.0.0.1 for the apex and every name below
// it (or, for a name given addresses by SetAddrs, A and AAAA records of
// those), TXT records the test sets, and an SOA at the apex (also in the
// authority section of empty answers); names outside the zone are
// NXDOMAIN. For CAA checks it also answers CAA records, CNAMEs (chased
// within the zone, as a recursive resolver would) and a chosen RCODE for
// a name (caa.go). It serves UDP and TCP on one port (Pebble's validation
// authority asks over TCP only).
package testdns

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// Server is a running test DNS server.
type Server struct {
	// Addr is "127.0.0.1:<port>", the same port for UDP and TCP.
	Addr string

	zone    string
	servers []*dns.Server
	done    chan error

	mu     sync.Mutex
	txt    map[string][]string     // lower-case FQDN → values
	addrs  map[string][]netip.Addr // lower-case FQDN → its A and AAAA records, if not 127.0.0.1
	caa    map[string][]*dns.CAA   // lower-case FQDN → its CAA records (see caa.go)
	cname  map[string]string       // lower-case FQDN → the FQDN it is an alias of
	rcodes map[string]int          // lower-case FQDN → the RCODE every query about it gets
}

// Start serves zone (e.g. "example.com") until Close.
func Start(zone string) (*Server, error) {
	s := &Server{zone: strings.ToLower(dns.Fqdn(zone)), txt: map[string][]string{}, addrs: map[string][]netip.Addr{},
		caa: map[string][]*dns.CAA{}, cname: map[string]string{}, rcodes: map[string]int{}}
	// The UDP port is picked first; its TCP twin may be taken, so try a
	// few times.
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	for range 10 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("testdns: listen udp: %w", err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("testdns: no port free on both udp and tcp: %w", err)
	}
	s.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	s.servers = []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}}
	s.done = make(chan error, len(s.servers))
	for _, srv := range s.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { s.done <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-s.done:
			s.Close()
			return nil, fmt.Errorf("testdns: serve: %w", err)
		}
	}
	return s, nil
}

// Close stops the server and waits for it.
func (s *Server) Close() {
	for _, srv := range s.servers {
		_ = srv.Shutdown()
	}
	for range s.servers {
		<-s.done
	}
	s.servers = nil
}

// AddTXT adds a TXT value at fqdn (several values may live at one name).
func (s *Server) AddTXT(fqdn, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.ToLower(dns.Fqdn(fqdn))
	s.txt[name] = append(s.txt[name], value)
}

// DeleteTXT removes one TXT value at fqdn.
func (s *Server) DeleteTXT(fqdn, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.ToLower(dns.Fqdn(fqdn))
	s.txt[name] = slices.DeleteFunc(s.txt[name], func(v string) bool { return v == value })
}

// SetAddrs makes fqdn, a name in the zone, resolve to addrs instead of
// 127.0.0.1: an IPv4 address is answered in an A record, an IPv6 address
// (an IPv4-mapped one included, as it is) in an AAAA record. No address at
// all leaves the name without A and AAAA records.
func (s *Server) SetAddrs(fqdn string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs[strings.ToLower(dns.Fqdn(fqdn))] = slices.Clone(addrs)
}

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)
	if !dns.IsSubDomain(s.zone, name) {
		m.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(m)
		return
	}
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: 0}
	}
	soa := &dns.SOA{
		Hdr: dns.RR_Header{Name: s.zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET},
		Ns:  "ns." + s.zone, Mbox: "hostmaster." + s.zone, Serial: 1, Refresh: 60, Retry: 60, Expire: 60, Minttl: 0,
	}
	if s.answerSpecial(m, q) {
		_ = w.WriteMsg(m)
		return
	}
	s.mu.Lock()
	addrs, custom := s.addrs[name]
	s.mu.Unlock()
	switch {
	case custom && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeAAAA):
		for _, a := range addrs {
			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6():
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
			}
		}
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.IPv4(127, 0, 0, 1)})
	case q.Qtype == dns.TypeTXT:
		s.mu.Lock()
		for _, v := range s.txt[name] {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{v}})
		}
		s.mu.Unlock()
	case q.Qtype == dns.TypeSOA:
		if name == s.zone {
			m.Answer = append(m.Answer, soa)
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, soa)
	}
	_ = w.WriteMsg(m)
}
