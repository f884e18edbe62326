package notify_test

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A server that refuses an EHLO name not fully qualified (Postfix's
// reject_non_fqdn_helo_hostname, common on submission relays) takes the
// mail: the client greets it with the destination's helo, or by default
// with the machine's fully qualified name or its own address as a
// literal, never a bare "localhost".
func TestAnEmailGreetsTheServerWithANameAServerRefusingNonFQDNNamesTakes(t *testing.T) {
	tests := []struct {
		name string
		helo string
		want func(string) bool
	}{
		{"ok/the configured helo", "acme.example.net", func(got string) bool { return got == "acme.example.net" }},
		{"ok/the configured address literal", "[127.0.0.1]", func(got string) bool { return got == "[127.0.0.1]" }},
		{"ok/by default a fully qualified name or an address literal", "", func(got string) bool {
			return strings.Contains(got, ".") && !strings.HasPrefix(got, "localhost")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, false)
			srv.fqdnHELO = true
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com",
				To: []string{"ops@example.com"}, HELO: tt.helo}
			r := newRig(t, notify.Options{TLS: &tls.Config{RootCAs: srv.certs}}, dst)
			ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
			if j := r.wait(t, ids[0]); j.Status != store.JobDone {
				t.Errorf("job %s after %d attempts: %s", j.Status, j.Attempts, j.LastError)
			}
			hellos := srv.helloNames()
			if len(hellos) == 0 {
				t.Fatal("the server was never greeted")
			}
			if !tt.want(hellos[0]) {
				t.Errorf("EHLO %q", hellos[0])
			}
		})
	}
}

// A helo that no server could take (RFC 5321 has EHLO take a fully
// qualified name or an address literal), or one on another type of
// destination, fails at load naming the key.
func TestAnEmailHELOThatIsNoNameFailsAtLoadNamingIt(t *testing.T) {
	email := func(helo string) notify.Destination {
		return notify.Destination{Type: notify.TypeEmail, SMTP: "m.example.com:587", From: "a@example.com", To: []string{"b@example.com"}, HELO: helo}
	}
	tests := []struct {
		name string
		d    notify.Destination
		want string // "": valid
	}{
		{"ok/a fully qualified name", email("mail.example.net"), ""},
		{"ok/a fully qualified name ending in a dot", email("mail.example.net."), ""},
		{"ok/an IPv4 address literal", email("[192.0.2.1]"), ""},
		{"ok/an IPv6 address literal", email("[IPv6:2001:db8::1]"), ""},
		{"fail/a blank", email("mail example"), `notify email: helo: "mail example" is not a domain name or an address literal`},
		{"fail/a line break", email("a.example\r\nRCPT TO:<x@example.com>"), "notify email: helo: "},
		{"fail/a bare name, as {system.hostname} often is", email("vm"), `notify email: helo: "vm" is not fully qualified`},
		{"fail/localhost", email("localhost"), `notify email: helo: "localhost" is not fully qualified`},
		{"fail/an IPv4 address without brackets", email("192.0.2.1"), `notify email: helo: "192.0.2.1" is not a domain name or an address literal`},
		{"fail/an underscore", email("mail_1.example.net"), "notify email: helo: "},
		{"fail/an address without brackets", email("192.0.2.1:25"), "notify email: helo: "},
		{"fail/an IPv6 literal without its tag", email("[2001:db8::1]"), "notify email: helo: "},
		{"fail/on a webhook", notify.Destination{Type: notify.TypeWebhook, URL: "https://h.example.com", HELO: "a.example.net"},
			"notify webhook: helo: is a setting of an email destination"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate: %v; want %q", err, tt.want)
			}
		})
	}
}
