//go:build linux

package validate

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// searchChild marks the test binary run by runWithResolvConf, inside its
// own namespaces, where the test's body runs.
const searchChild = "ACMEPROXY_VALIDATE_SEARCH_CHILD"

// searchZone is a resolver that knows only names under evil.test — a
// search domain's zone, as a cluster's (svc.cluster.local), in which
// anybody who can create a service has a name — answering each with
// 127.0.0.1, and records every name it is asked about.
type searchZone struct {
	mu    sync.Mutex
	asked []string
}

func (z *searchZone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	q := r.Question[0]
	z.mu.Lock()
	z.asked = append(z.asked, q.Name)
	z.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	switch {
	case !strings.HasSuffix(strings.ToLower(q.Name), ".evil.test."):
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)}}
	}
	_ = w.WriteMsg(m)
}

func (z *searchZone) names() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]string(nil), z.asked...)
}

// An ACME identifier is a fully qualified name. A machine's resolver
// configuration may list search domains with an ndots above the name's
// dots (Kubernetes sets ndots:5 and its cluster's domains): looked up as
// a relative name, "example.test" is tried as "example.test.<search
// domain>" first, and a name there — a service anyone in that namespace
// can create — would answer the validation in the identifier's place and
// get its certificate. http-01 and tls-alpn-01 look the identifier up
// rooted, through the system's resolver and through configured resolvers
// alike: here, where only the search domain's zone has the name, both
// find none.
func TestValidationLooksUpTheIdentifierAsRootedWhateverTheSearchDomains(t *testing.T) {
	if os.Getenv(searchChild) == "" {
		runWithResolvConf(t, "nameserver 127.0.0.1\nsearch evil.test\noptions ndots:5\n")
		return
	}
	zone := &searchZone{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	serveDNS(t, zone, pc, ln)
	httpPort, tlsPort := challengeServers(t)

	for _, tc := range []struct {
		name      string
		resolvers []string
	}{
		{"the system's resolver", nil},
		{"the configured resolvers", []string{"127.0.0.1:53"}},
	} {
		v := newValidator(t, Config{HTTPPort: httpPort, TLSPort: tlsPort, Resolvers: tc.resolvers})
		for _, ch := range []struct {
			name     string
			validate func() error
		}{
			{"http-01", func() error {
				return v.HTTP01(context.Background(), acme.IdentifierDNS, "example.test", "ok", testKeyAuth)
			}},
			{"tls-alpn-01", func() error {
				return v.TLSALPN01(context.Background(), acme.IdentifierDNS, "example.test", testKeyAuth)
			}},
		} {
			t.Run(tc.name+"/"+ch.name, func(t *testing.T) {
				before := len(zone.names())
				wantOutcome(t, ch.validate(), acme.ErrorDNS)
				for _, n := range zone.names()[before:] {
					if !strings.EqualFold(n, "example.test.") {
						t.Errorf("the lookup asked for %q; want only the identifier, rooted", n)
					}
				}
			})
		}
	}
}

// runWithResolvConf runs the calling test again in a child process with
// resolv as its /etc/resolv.conf and a loopback of its own (user, mount
// and network namespaces: no root needed where unprivileged namespaces
// are allowed), and fails with the child's output if it fails.
func runWithResolvConf(t *testing.T, resolv string) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		needNamespaces(t, err)
	}
	file := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(file, []byte(resolv), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := exec.Command(unshare, "-r", "-m", "-n", "sh", "-c", `ip link set lo up && mount --bind "$0" /etc/resolv.conf`, file)
	if out, err := probe.CombinedOutput(); err != nil {
		needNamespaces(t, fmt.Errorf("%v: %s", err, out))
	}
	cmd := exec.Command(unshare, "-r", "-m", "-n", "sh", "-c", `ip link set lo up && mount --bind "$0" /etc/resolv.conf && exec "$1" -test.run "^$2\$" -test.v`,
		file, os.Args[0], t.Name())
	cmd.Env = append(os.Environ(), searchChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test in its own namespaces: %v\n%s", err, out)
	}
	t.Logf("the test in its own namespaces:\n%s", out)
}

// needNamespaces skips the test, or fails it under ACMEPROXY_E2E=1, when
// it cannot have namespaces of its own.
func needNamespaces(t *testing.T, err error) {
	t.Helper()
	msg := "this test runs itself in user, mount and network namespaces of its own (unshare -r -m -n, util-linux, iproute2): " + err.Error()
	if os.Getenv("ACMEPROXY_E2E") == "1" {
		t.Fatalf("%s; ACMEPROXY_E2E=1 requires it", msg)
	}
	t.Skipf("skipping: %s (with ACMEPROXY_E2E=1 this fails instead)", msg)
}
