package validate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// testDigest is what a dns-01 TXT record must hold for testKeyAuth.
func testDigest() string {
	sum := sha256.Sum256([]byte(testKeyAuth))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func txt(name string, values ...string) dns.RR {
	return &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: values}
}

func cname(name, target string) dns.RR {
	return &dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 60}, Target: target}
}

// testZone answers as a recursive resolver would for the test names.
type testZone struct{}

func (testZone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	want := testDigest()
	name := strings.ToLower(q.Name)
	switch {
	case q.Qtype != dns.TypeTXT:
		m.Rcode = dns.RcodeRefused
	case name == "_acme-challenge.ok.test.":
		m.Answer = []dns.RR{txt(q.Name, want)}
	case name == "_acme-challenge.split.test.":
		m.Answer = []dns.RR{txt(q.Name, want[:20], want[20:])}
	case name == "_acme-challenge.several.test.":
		m.Answer = []dns.RR{txt(q.Name, "stale"), txt(q.Name, want), txt(q.Name, "other")}
	case name == "_acme-challenge.wrong.test.":
		m.Answer = []dns.RR{txt(q.Name, "SECRET-stale"), txt(q.Name, "SECRET-other")}
	case name == "_acme-challenge.nodata.test.":
		// NOERROR without an answer.
	case name == "_acme-challenge.servfail.test.":
		m.Rcode = dns.RcodeServerFailure
	case name == "_acme-challenge.cname.test.":
		m.Answer = []dns.RR{
			cname(q.Name, "hop.delegated.test."),
			cname("hop.delegated.test.", "target.delegated.test."),
			txt("target.delegated.test.", want),
		}
	case name == "_acme-challenge.cname-only.test.":
		m.Answer = []dns.RR{cname(q.Name, "elsewhere.delegated.test.")}
	case name == "elsewhere.delegated.test.":
		m.Answer = []dns.RR{txt(q.Name, want)}
	case name == "_acme-challenge.cname-nx.test.":
		m.Answer = []dns.RR{cname(q.Name, "gone.delegated.test.")}
		m.Rcode = dns.RcodeNameError
	case name == "_acme-challenge.cname-wrong.test.":
		m.Answer = []dns.RR{cname(q.Name, "wrong.delegated.test."), txt("wrong.delegated.test.", "SECRET-stale")}
	case name == "_acme-challenge.cname-loop.test.":
		m.Answer = []dns.RR{cname(q.Name, "a.loop.test.")}
	case name == "a.loop.test.":
		m.Answer = []dns.RR{cname(q.Name, "b.loop.test.")}
	case name == "b.loop.test.":
		m.Answer = []dns.RR{cname(q.Name, "a.loop.test.")}
	case name == "_acme-challenge.big.test.":
		if udp {
			m.Truncated = true
			break
		}
		for range 20 {
			m.Answer = append(m.Answer, txt(q.Name, strings.Repeat("x", 200)))
		}
		m.Answer = append(m.Answer, txt(q.Name, want))
	default:
		m.Rcode = dns.RcodeNameError
	}
	w.WriteMsg(m)
}

// startDNS serves h over UDP and TCP on one loopback port.
func startDNS(t *testing.T, h dns.Handler) string {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			pc.Close() // the TCP port is taken; try another
			continue
		}
		serveDNS(t, h, pc, ln)
		return addr
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return ""
}

// serveDNS answers queries with h on pc (UDP) and ln (TCP) until the test
// ends.
func serveDNS(t *testing.T, h dns.Handler, pc net.PacketConn, ln net.Listener) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the shutdowns below: cleanups run last first
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Go(func() { srv.ActivateAndServe() })
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
}

// silentResolver reads queries and never answers.
func silentResolver(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String()
}

// closedResolver is a loopback UDP port nothing listens on: queries to it
// are refused.
func closedResolver(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func TestDNS01FindsTheDigestAmongTheTXTRecords(t *testing.T) {
	good := startDNS(t, testZone{})
	tests := []struct {
		name      string
		domain    string
		resolvers func(t *testing.T) []string
		timeout   time.Duration
		want      acme.ProblemType
	}{
		{name: "ok/one record", domain: "ok.test"},
		{name: "ok/name in another case", domain: "OK.Test"},
		{name: "ok/record of several strings", domain: "split.test"},
		{name: "ok/several records with one right", domain: "several.test"},
		{name: "ok/CNAME chain in the answer followed", domain: "cname.test"},
		{name: "ok/CNAME target asked about when the answer stops at it", domain: "cname-only.test"},
		{name: "ok/truncated UDP answer retried over TCP", domain: "big.test"},
		{
			name: "ok/next resolver after one that refuses", domain: "ok.test",
			resolvers: func(t *testing.T) []string { return []string{closedResolver(t), good} },
		},
		{
			name: "ok/next resolver after a silent one", domain: "ok.test", timeout: time.Second,
			resolvers: func(t *testing.T) []string { return []string{silentResolver(t), good} },
		},
		{name: "fail/wrong value", domain: "wrong.test", want: acme.ErrorIncorrectResponse},
		{name: "fail/wrong value behind a CNAME", domain: "cname-wrong.test", want: acme.ErrorIncorrectResponse},
		{name: "fail/NXDOMAIN", domain: "nxdomain.test", want: acme.ErrorDNS},
		{name: "fail/NXDOMAIN behind a CNAME", domain: "cname-nx.test", want: acme.ErrorDNS},
		{name: "fail/no TXT record", domain: "nodata.test", want: acme.ErrorDNS},
		{name: "fail/SERVFAIL", domain: "servfail.test", want: acme.ErrorDNS},
		{name: "fail/CNAME loop", domain: "cname-loop.test", want: acme.ErrorDNS},
		{
			name: "fail/resolver timeout", domain: "ok.test", timeout: 300 * time.Millisecond, want: acme.ErrorDNS,
			resolvers: func(t *testing.T) []string { return []string{silentResolver(t)} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Resolvers: []string{good}, Timeout: tt.timeout}
			if tt.resolvers != nil {
				cfg.Resolvers = tt.resolvers(t)
			}
			v := newValidator(t, cfg)
			start := time.Now()
			err := v.DNS01(context.Background(), tt.domain, testKeyAuth)
			if p := wantOutcome(t, err, tt.want); p != nil && strings.Contains(p.Detail, "SECRET") {
				t.Errorf("detail echoes a record: %s", p.Detail)
			}
			if tt.timeout != 0 && time.Since(start) > tt.timeout+time.Second {
				t.Errorf("took %s, beyond the %s timeout", time.Since(start), tt.timeout)
			}
		})
	}
}

func TestDNS01WithoutAResolverThatAnswersIsAFaultNotAProblem(t *testing.T) {
	v := newValidator(t, Config{Resolvers: []string{closedResolver(t), closedResolver(t)}})
	wantFault(t, v.DNS01(context.Background(), "ok.test", testKeyAuth))
}

func TestDNS01WithACancelledCallerIsAFaultNotAProblem(t *testing.T) {
	v := newValidator(t, Config{Resolvers: []string{silentResolver(t)}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	wantFault(t, v.DNS01(ctx, "ok.test", testKeyAuth))
}

func TestDNS01WithoutResolversReportsWhy(t *testing.T) {
	v := newValidator(t, Config{})
	v.resolvers, v.resolversErr = nil, errResolvConf
	if err := v.DNS01(context.Background(), "ok.test", testKeyAuth); err != errResolvConf {
		t.Fatalf("got %v, want %v", err, errResolvConf)
	}
}

var errResolvConf = &net.AddrError{Err: "no resolv.conf", Addr: "test"}
