package notify_test

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The username and password go only to a server that asks for them:
// one whose EHLO answer offers AUTH with PLAIN, or else LOGIN (which
// Microsoft 365, Exchange and some relays offer alone), the mechanisms
// sent. Go's SMTP client sends AUTH PLAIN, the credentials in its first
// line, whatever the server offered; a server not offering it (a relay
// trusting its network, Postfix's smtpd_sasl_auth_enable=no, a
// submission port offering AUTH only over TLS to a tls none client)
// would be sent them. The delivery is abandoned at once instead, with
// an error saying why and holding no secret.
func TestAnEmailsCredentialsGoOnlyToAServerThatOffersAUTHPLAINOrLOGIN(t *testing.T) {
	const password = "pw-CANARY-0815"
	tests := []struct {
		name      string
		tls       string // the destination's
		implicit  bool   // the server speaks TLS at once
		authMechs string // the server's AUTH offer ("-": none)
		wantAuth  int    // AUTH commands the server gets
		wantMech  string // the one they used, when delivered
		wantErr   string // "": delivered
	}{
		{name: "ok/over STARTTLS to a server offering AUTH PLAIN", wantAuth: 1, wantMech: "PLAIN"},
		{name: "ok/over implicit TLS to a server offering AUTH LOGIN PLAIN, by PLAIN", tls: notify.TLSImplicit, implicit: true,
			authMechs: "LOGIN PLAIN", wantAuth: 1, wantMech: "PLAIN"},
		{name: "ok/over tls none to 127.0.0.1 offering AUTH PLAIN", tls: notify.TLSNone, wantAuth: 1, wantMech: "PLAIN"},
		{name: "ok/over STARTTLS to a server offering AUTH LOGIN XOAUTH2 only, as Microsoft 365 does, by LOGIN",
			authMechs: "LOGIN XOAUTH2", wantAuth: 1, wantMech: "LOGIN"},
		{name: "ok/over implicit TLS to a server offering AUTH login in lower case, by LOGIN", tls: notify.TLSImplicit, implicit: true,
			authMechs: "login", wantAuth: 1, wantMech: "LOGIN"},
		{name: "ok/over tls none to 127.0.0.1 offering AUTH LOGIN only", tls: notify.TLSNone, authMechs: "LOGIN", wantAuth: 1, wantMech: "LOGIN"},
		{name: "fail/over STARTTLS to a server offering no AUTH", authMechs: "-",
			wantErr: "AUTH: the server does not offer authentication (no AUTH in its EHLO answer); the username and password were not sent"},
		{name: "fail/over implicit TLS to a server offering no AUTH", tls: notify.TLSImplicit, implicit: true, authMechs: "-",
			wantErr: "AUTH: the server does not offer authentication"},
		{name: "fail/over tls none to 127.0.0.1 offering no AUTH in the clear", tls: notify.TLSNone, authMechs: "-",
			wantErr: "AUTH: the server does not offer authentication"},
		{name: "fail/to a server offering AUTH without PLAIN or LOGIN", authMechs: "CRAM-MD5 XOAUTH2",
			wantErr: "AUTH: the server offers CRAM-MD5 XOAUTH2, neither PLAIN nor LOGIN, the mechanisms sent; the username and password were not sent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, tt.implicit)
			srv.authMechs = tt.authMechs
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, TLS: tt.tls, From: "acme@example.com",
				To: []string{"ops@example.com"}, Username: "acme", Password: password}
			r := newRig(t, notify.Options{TLS: &tls.Config{RootCAs: srv.certs}}, dst)
			ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
			j := r.wait(t, ids[0])
			if n := srv.authCount(); n != tt.wantAuth {
				t.Errorf("the server got %d AUTH commands; want %d", n, tt.wantAuth)
			}
			if tt.wantErr == "" {
				if j.Status != store.JobDone {
					t.Fatalf("job %s after %d attempts: %s", j.Status, j.Attempts, j.LastError)
				}
				m := srv.received()
				if len(m) != 1 {
					t.Fatalf("the server got %d mails; want one", len(m))
				}
				if mech, _, _ := strings.Cut(m[0].auth, " "); !strings.EqualFold(mech, tt.wantMech) {
					t.Errorf("authenticated by AUTH %s; want %s", m[0].auth, tt.wantMech)
				}
				wantLogins := 0
				if tt.wantMech == "LOGIN" {
					wantLogins = 1
				}
				if got := srv.loginsSeen(); len(got) != wantLogins || wantLogins == 1 && got[0] != "acme:"+password {
					t.Errorf("the server's LOGIN prompts were answered %q; want the username and password, %d times", got, wantLogins)
				}
				return
			}
			if j.Status != store.JobFailed || j.Attempts != 1 || !strings.Contains(j.LastError, tt.wantErr) {
				t.Errorf("job %s after %d attempts (%s); want failed at once with %q", j.Status, j.Attempts, j.LastError, tt.wantErr)
			}
			if m := srv.received(); len(m) != 0 {
				t.Errorf("the server got %d mails; want none", len(m))
			}
			for i, e := range r.logs.All() {
				if text := fmt.Sprintf("%s %v", e.Message, e.ContextMap()); strings.Contains(text, password) {
					t.Errorf("log line %d holds the password: %s", i, text)
				}
			}
		})
	}
}
