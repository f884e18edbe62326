package validate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// The policy of these tests allows the names below example.test but
// denied.example.test.
func testRedirectPolicy(host string) error {
	switch h := strings.ToLower(host); {
	case h == "denied.example.test":
		return errors.New("denied.example.test is denied by this profile's policy")
	case !strings.HasSuffix(h, ".example.test"):
		return errors.New(h + " is not allowed by this profile's policy")
	}
	return nil
}

func allowEverything(string) error { return nil }

// A redirect goes to a DNS name the policy allows, never to an IP address
// however spelt. The connections go through a Dial hook that reaches the
// test's server for every host of the table, so a redirect let through
// would be followed and the validation would succeed: a refusal is the
// redirect rule's doing, not a failed connection.
func TestHTTP01FollowsARedirectOnlyToADNSNameThePolicyAllows(t *testing.T) {
	site := startGuardSite(t)
	hosts := []string{
		"example.test", "www.example.test", "denied.example.test", "intranet.corp.test",
		"127.0.0.1", "10.0.0.5", "169.254.169.254", "::1", "::ffff:10.0.0.5", "fe80::1%lo",
		"127.1", "2130706433", "0x7f000001", "10.0.0.5.",
	}
	tests := []struct {
		name   string
		policy func(host string) error
		host   string // as the Location header has it
		want   string // "": followed; else in the detail
	}{
		{name: "ok/a name the policy allows", policy: testRedirectPolicy, host: "www.example.test"},
		{name: "ok/any name without a policy", host: "intranet.corp.test"},
		{name: "fail/a name the policy denies", policy: testRedirectPolicy, host: "denied.example.test",
			want: "a redirect to denied.example.test is not allowed: denied.example.test is denied by this profile's policy"},
		{name: "fail/an intranet name outside the policy", policy: testRedirectPolicy, host: "intranet.corp.test",
			want: "a redirect to intranet.corp.test is not allowed: intranet.corp.test is not allowed by this profile's policy"},
		{name: "fail/IPv4 loopback literal", policy: allowEverything, host: "127.0.0.1", want: "a redirect to the IP address 127.0.0.1 is not allowed"},
		{name: "fail/RFC 1918 literal", policy: allowEverything, host: "10.0.0.5", want: "a redirect to the IP address 10.0.0.5 is not allowed"},
		{name: "fail/RFC 1918 literal with a trailing dot", policy: allowEverything, host: "10.0.0.5.", want: "a redirect to the IP address 10.0.0.5. is not allowed"},
		{name: "fail/link-local literal", policy: allowEverything, host: "169.254.169.254", want: "a redirect to the IP address 169.254.169.254 is not allowed"},
		{name: "fail/IPv6 literal", policy: allowEverything, host: "::1", want: "a redirect to the IP address ::1 is not allowed"},
		{name: "fail/IPv6 literal with a zone", policy: allowEverything, host: "fe80::1%25lo", want: "a redirect to the IP address fe80::1%lo is not allowed"},
		{name: "fail/IPv4-mapped RFC 1918 literal", policy: allowEverything, host: "::ffff:10.0.0.5", want: "a redirect to the IP address ::ffff:10.0.0.5 is not allowed"},
		{name: "fail/short dotted IPv4 spelling", policy: allowEverything, host: "127.1", want: "a redirect to the IP address 127.1 is not allowed"},
		{name: "fail/decimal IPv4 spelling", policy: allowEverything, host: "2130706433", want: "a redirect to the IP address 2130706433 is not allowed"},
		{name: "fail/hexadecimal IPv4 spelling", policy: allowEverything, host: "0x7f000001", want: "a redirect to the IP address 0x7f000001 is not allowed"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newValidator(t, Config{
				HTTPPort: site.port, Timeout: 5 * time.Second,
				RedirectPolicy: tt.policy, Dial: loopbackDial(hosts...),
			})
			tok := site.redirect("policy-"+string(rune('a'+i)), tt.host)
			err := v.HTTP01(context.Background(), acme.IdentifierDNS, "example.test", tok, testKeyAuth)
			if tt.want == "" {
				wantOutcome(t, err, "")
				return
			}
			p := wantOutcome(t, err, acme.ErrorConnection)
			if !strings.Contains(p.Detail, tt.want) {
				t.Errorf("detail %q does not say %q", p.Detail, tt.want)
			}
		})
	}
}

// The detail of a wrong answer says nothing of what came back, not even
// its size: with redirects, that would tell a client about servers it
// cannot reach itself.
func TestHTTP01DetailsDoNotEchoTheSizeOfTheResponse(t *testing.T) {
	httpPort, _ := challengeServers(t)
	v := newValidator(t, Config{HTTPPort: httpPort, Dial: loopbackDial("127.0.0.1")})
	for _, tok := range []string{"wrong", "huge"} {
		t.Run("fail/"+tok, func(t *testing.T) {
			p := wantOutcome(t, v.HTTP01(context.Background(), acme.IdentifierIP, "127.0.0.1", tok, testKeyAuth), acme.ErrorIncorrectResponse)
			want := fmt.Sprintf("fetching http://127.0.0.1:%d/.well-known/acme-challenge/%s: the response is not the expected key authorization", httpPort, tok)
			if p.Detail != want {
				t.Errorf("detail %q, want %q", p.Detail, want)
			}
		})
	}
}

// An IP identifier's server may redirect to its own address (http to
// https, a relative Location): that is where validation connected
// already. Another address stays refused, as for a DNS identifier.
func TestHTTP01OfAnIPIdentifierFollowsARedirectToItsOwnAddressOnly(t *testing.T) {
	site := startGuardSite(t)
	tests := []struct {
		name, ident, host string
		want              string // "": followed; else in the detail
	}{
		{name: "ok/an IPv4 identifier redirected to itself", ident: "10.0.0.5", host: "10.0.0.5"},
		{name: "ok/an IPv6 identifier redirected to itself", ident: "2001:db8::5", host: "2001:db8::5"},
		{name: "ok/an IPv6 identifier redirected to itself spelt otherwise", ident: "2001:db8::5", host: "2001:db8:0::5"},
		{name: "fail/an IPv4 identifier redirected to another address", ident: "10.0.0.5", host: "10.0.0.6",
			want: "a redirect to the IP address 10.0.0.6 is not allowed"},
		{name: "fail/an IPv4 identifier redirected to a spelling inet_aton reads", ident: "10.0.0.5", host: "10.5",
			want: "a redirect to the IP address 10.5 is not allowed"},
		{name: "fail/a DNS identifier redirected to its address", ident: "example.test", host: "10.0.0.5",
			want: "a redirect to the IP address 10.0.0.5 is not allowed"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newValidator(t, Config{HTTPPort: site.port, Timeout: 5 * time.Second, RedirectPolicy: allowEverything,
				Dial: loopbackDial("10.0.0.5", "10.0.0.6", "2001:db8::5", "2001:db8:0::5", "example.test", "10.5")})
			tok := site.redirect("own-"+string(rune('a'+i)), tt.host)
			typ := acme.IdentifierIP
			if tt.ident == "example.test" {
				typ = acme.IdentifierDNS
			}
			err := v.HTTP01(context.Background(), typ, tt.ident, tok, testKeyAuth)
			if tt.want == "" {
				wantOutcome(t, err, "")
				return
			}
			p := wantOutcome(t, err, acme.ErrorConnection)
			if !strings.Contains(p.Detail, tt.want) {
				t.Errorf("detail %q does not say %q", p.Detail, tt.want)
			}
		})
	}
}
