//go:build unix

package e2e

import (
	"net"
	"strconv"
	"testing"

	"github.com/miekg/dns"
)

// startDNS runs a DNS server on 127.0.0.1 (UDP and TCP, same port) that
// answers A 127.0.0.1 for zone and every name below it, an empty answer
// for their other types, and NXDOMAIN for everything else. It returns
// "127.0.0.1:<port>" and stops on cleanup.
func startDNS(t *testing.T, zone string) string {
	t.Helper()
	zone = dns.Fqdn(zone)
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		for _, q := range req.Question {
			if !dns.IsSubDomain(zone, q.Name) {
				m.Rcode = dns.RcodeNameError
				continue
			}
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		_ = w.WriteMsg(m)
	})

	// The UDP port is picked first; its TCP twin may be taken, so try a
	// few times.
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	for range 10 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatalf("dns: listen udp: %v", err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatalf("dns: no port free on both udp and tcp: %v", err)
	}

	servers := []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: ln, Handler: handler},
	}
	for _, s := range servers {
		started := make(chan struct{})
		failed := make(chan error, 1)
		s.NotifyStartedFunc = func() { close(started) }
		go func() { failed <- s.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-failed:
			t.Fatalf("dns: serve: %v", err)
		}
		t.Cleanup(func() {
			_ = s.Shutdown()
			<-failed
		})
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
}
