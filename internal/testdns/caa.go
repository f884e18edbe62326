package testdns

import (
	"strings"

	"github.com/miekg/dns"
)

// AddCAA adds a CAA record (RFC 8659 §4.1) at fqdn: its flags byte, its
// property tag and its value, as written in a zone file without quotes.
func (s *Server) AddCAA(fqdn string, flag uint8, tag, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.ToLower(dns.Fqdn(fqdn))
	s.caa[name] = append(s.caa[name], &dns.CAA{
		Hdr:  dns.RR_Header{Name: dns.Fqdn(fqdn), Rrtype: dns.TypeCAA, Class: dns.ClassINET},
		Flag: flag, Tag: tag, Value: value,
	})
}

// ClearCAA removes every CAA record at fqdn.
func (s *Server) ClearCAA(fqdn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.caa, strings.ToLower(dns.Fqdn(fqdn)))
}

// SetCNAME makes fqdn an alias of target. A query about fqdn is answered
// with the CNAME and, when target is in the zone, what target has for the
// query's type — its CAA or TXT records, A 127.0.0.1 — (chased further through target's own CNAMEs), as a
// recursive resolver answers; a target outside the zone is left for the
// client to ask about.
func (s *Server) SetCNAME(fqdn, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cname[strings.ToLower(dns.Fqdn(fqdn))] = dns.Fqdn(target)
}

// SetRcode makes every query about fqdn answered with rcode (for example
// dns.RcodeServerFailure) and nothing else; dns.RcodeSuccess undoes it.
func (s *Server) SetRcode(fqdn string, rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.ToLower(dns.Fqdn(fqdn))
	if rcode == dns.RcodeSuccess {
		delete(s.rcodes, name)
		return
	}
	s.rcodes[name] = rcode
}

// answerSpecial answers a query about a name given an RCODE, a CNAME or
// CAA records, or a CAA query at all (NOERROR and empty where there are
// none), and reports whether it did; the other queries are left to serve.
func (s *Server) answerSpecial(m *dns.Msg, q dns.Question) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.ToLower(q.Name)
	if rc, ok := s.rcodes[name]; ok {
		m.Rcode = rc
		return true
	}
	if _, ok := s.cname[name]; !ok && q.Qtype != dns.TypeCAA {
		return false
	}
	owner := q.Name
	for range 8 { // a bound on chains (and loops) of CNAMEs
		lower := strings.ToLower(owner)
		if rc, ok := s.rcodes[lower]; ok {
			m.Rcode = rc
			return true
		}
		if target, ok := s.cname[lower]; ok {
			m.Answer = append(m.Answer, &dns.CNAME{
				Hdr:    dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME, Class: dns.ClassINET},
				Target: target,
			})
			if !dns.IsSubDomain(s.zone, strings.ToLower(target)) {
				return true
			}
			owner = target
			continue
		}
		switch q.Qtype {
		case dns.TypeCAA:
			for _, rr := range s.caa[lower] {
				c := *rr
				c.Hdr.Name = owner
				m.Answer = append(m.Answer, &c)
			}
		case dns.TypeTXT:
			for _, v := range s.txt[lower] {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{v}})
			}
		case dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET},
				A:   []byte{127, 0, 0, 1},
			})
		}
		return true
	}
	m.Rcode = dns.RcodeServerFailure
	return true
}
