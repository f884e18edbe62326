//go:build unix

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/mail"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	xacme "golang.org/x/crypto/acme"
)

// A certificate issued by the built Caddy is mailed, as `notify email`
// with `tls starttls` or `tls implicit` sends it, through Debian's Postfix — the MTA an
// operator relays through — whose certificate is from the operator's
// private CA, trusted as Go programs trust one (SSL_CERT_FILE in Caddy's
// environment). Each recipient's maildir gets the one message: From, To
// and the subject naming the event, the profile and the identifier, as
// the README says, and a quoted-printable body whose lines carry the
// event; Postfix's Received line says it came over TLS. With a username
// and password, as the README's example has them, Postfix takes mail
// only from a client that authenticated (AUTH PLAIN, checked by Cyrus
// SASL; AUTH LOGIN when Postfix offers LOGIN alone, as Microsoft 365
// does), and the password is not in Caddy's log. Postfix refuses a
// client whose EHLO name is not fully qualified, as submission relays
// often do (reject_non_fqdn_helo_hostname): Caddy greets it with the
// destination's helo (its placeholders replaced), or by default with a
// name Postfix takes, and the Received line names it.
func TestAnIssuedCertificatesEmailIsDeliveredThroughPostfixOverTLS(t *testing.T) {
	const (
		profile  = "mta"
		name     = "mail.example.com"
		from     = "acme@example.net"
		password = "smtp-password-e2e"
	)
	recipients := []string{"ops@example.com", "sec@example.com"}
	tests := []struct {
		name     string
		tls      string // the destination's tls
		username string // "": no authentication
		helo     string // as the config writes it; "": the default
		greeted  string // the name Postfix is greeted with, when helo is set
		mechs    string // the SASL mechanisms Postfix offers; "": PLAIN LOGIN
		method   string // the one Postfix logs the client used, with a username
	}{
		{name: "over STARTTLS without authentication", tls: "starttls"},
		{name: "over STARTTLS greeting Postfix with the configured helo", tls: "starttls", helo: "acme-client.example.net", greeted: "acme-client.example.net"},
		{name: "over STARTTLS greeting Postfix with a helo from the environment", tls: "starttls", helo: "{env.SMTP_HELO}", greeted: "acme-env.example.net"},
		{name: "over STARTTLS authenticated with the username and password", tls: "starttls", username: "acme", method: "PLAIN"},
		{name: "over STARTTLS authenticated by AUTH LOGIN, the one mechanism Postfix offers", tls: "starttls", username: "acme",
			mechs: "LOGIN", method: "LOGIN"},
		{name: "over implicit TLS (SMTPS)", tls: "implicit"},
	}
	needPostfix(t)
	caddy := buildCaddy(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pki := makeTestPKI(t, t.TempDir(), "Test Mail CA", "localhost", "smtpd")
			caFile, certFile, keyFile := pki.caFile, pki.certFile, pki.keyFile
			mta := startPostfix(t, postfixConfig{certFile: certFile, keyFile: keyFile, recipients: recipients,
				implicit: tc.tls == "implicit", username: tc.username, password: password, mechs: tc.mechs})

			auth := ""
			if tc.username != "" {
				auth = fmt.Sprintf(" username %s\n password {env.SMTP_PASSWORD}\n", tc.username)
			}
			if tc.helo != "" {
				auth += fmt.Sprintf(" helo %s\n", tc.helo)
			}
			s := startCertbotServer(t, caddy, "", certbotSite{
				profile: profile,
				body: fmt.Sprintf("notify email {\n smtp localhost:%d\n tls %s\n from %s\n to %s\n%s events certificate_issued\n}",
					mta.port, tc.tls, from, strings.Join(recipients, " "), auth),
				env: []string{"SSL_CERT_FILE=" + caFile, "SMTP_PASSWORD=" + password, "SMTP_HELO=acme-env.example.net"},
			})
			wellKnown := filepath.Join(t.TempDir(), "acme-challenge")
			serveWellKnown(t, wellKnown, s.challengePort)

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			leaf := issueOverHTTP01(ctx, t, s, wellKnown, name)
			serial := hex.EncodeToString(leaf.SerialNumber.Bytes())

			for _, rcpt := range recipients {
				msg := mta.waitMessage(t, rcpt, 20*time.Second)
				h := msg.Header
				if got := h.Get("From"); got != from {
					t.Errorf("%s: From %q; want %q", rcpt, got, from)
				}
				if got, want := h.Get("To"), strings.Join(recipients, ", "); got != want {
					t.Errorf("%s: To %q; want %q", rcpt, got, want)
				}
				if got, want := h.Get("Subject"), "[acme_proxy] certificate_issued ("+profile+"): "+name; got != want {
					t.Errorf("%s: Subject %q; want %q", rcpt, got, want)
				}
				received := h.Get("Received")
				if want := "from " + tc.greeted + " (localhost [127.0.0.1])"; tc.helo != "" && !strings.HasPrefix(received, want) {
					t.Errorf("%s: Postfix's Received line does not start with %q (the helo): %s", rcpt, want, received)
				}
				if !strings.Contains(received, "(using TLSv1.") {
					t.Errorf("%s: Postfix did not receive the mail over TLS: Received: %s", rcpt, received)
				}
				if want := "(Authenticated sender: " + tc.username + "@"; tc.username != "" && !strings.Contains(received, want) {
					t.Errorf("%s: Postfix's Received line does not contain %q: %s", rcpt, want, received)
				}
				if got := h.Get("Content-Transfer-Encoding"); got != "quoted-printable" {
					t.Fatalf("%s: Content-Transfer-Encoding %q; want quoted-printable", rcpt, got)
				}
				body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
				if err != nil {
					t.Fatalf("%s: the body is not quoted-printable: %v", rcpt, err)
				}
				lines := map[string]string{}
				for l := range strings.Lines(string(body)) {
					k, v, _ := strings.Cut(strings.TrimRight(l, "\r\n"), ":")
					lines[k] = strings.TrimSpace(v)
				}
				for k, want := range map[string]string{"event": "certificate_issued", "profile": profile,
					"identifier": "dns " + name, "serial": serial} {
					if lines[k] != want {
						t.Errorf("%s: the body's %s is %q; want %q in:\n%s", rcpt, k, lines[k], want, body)
					}
				}
				if lines["order"] == "" || lines["account"] == "" || lines["time"] == "" {
					t.Errorf("%s: the body names no order, account or time:\n%s", rcpt, body)
				}
			}
			// smtpd logs "client=localhost[127.0.0.1], sasl_method=LOGIN,
			// sasl_username=acme" for a client that authenticated.
			if want := "sasl_method=" + tc.method + ","; tc.method != "" && !strings.Contains(mta.log.String(), want) {
				t.Errorf("Postfix's log lacks %q: the client did not authenticate by %s", want, tc.method)
			}
			if strings.Contains(s.proc.out.String(), password) {
				t.Errorf("Caddy's log carries the SMTP password")
			}
		})
	}
}

// A recipient Postfix refuses at RCPT TO (one not in its mailbox table:
// "550 5.1.1 … User unknown in virtual mailbox table") does not keep the
// mail from the others: the one it accepts gets it, once, and Caddy logs
// one notification_partly_delivered line naming the refused recipient
// with the first line of Postfix's reply; nothing is abandoned.
func TestANotifyEmailGoesToTheRecipientsPostfixAcceptsWhenItRefusesOne(t *testing.T) {
	const (
		profile = "mta"
		ops     = "ops@example.com"
		unknown = "nobody@example.com"
	)
	needPostfix(t)
	caddy := buildCaddy(t)
	pki := makeTestPKI(t, t.TempDir(), "Test Mail CA", "localhost", "smtpd")
	mta := startPostfix(t, postfixConfig{certFile: pki.certFile, keyFile: pki.keyFile, recipients: []string{ops}})
	s := startCertbotServer(t, caddy, "", certbotSite{
		profile: profile,
		body: fmt.Sprintf("notify email {\n smtp localhost:%d\n tls starttls\n from acme@example.net\n to %s %s\n events account_created\n}",
			mta.port, unknown, ops),
		env: []string{"SSL_CERT_FILE=" + pki.caFile},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	registerAccount(ctx, t, s) // account_created

	msg := mta.waitMessage(t, ops, 20*time.Second)
	if got, want := msg.Header.Get("Subject"), "[acme_proxy] account_created ("+profile+")"; got != want {
		t.Errorf("Subject %q; want %q", got, want)
	}
	var partly struct {
		Level     string   `json:"level"`
		Delivered []string `json:"delivered"`
		Refused   []string `json:"refused"`
	}
	for deadline := time.Now().Add(10 * time.Second); partly.Level == ""; time.Sleep(100 * time.Millisecond) {
		for l := range strings.Lines(s.proc.out.String()) {
			if strings.Contains(l, `"notification_partly_delivered"`) {
				if err := json.Unmarshal([]byte(l), &partly); err != nil {
					t.Fatalf("the notification_partly_delivered line: %v: %s", err, l)
				}
			}
		}
		if partly.Level == "" && time.Now().After(deadline) {
			t.Fatalf("no notification_partly_delivered line within 10 s; Caddy's log:\n%s", s.proc.out)
		}
	}
	want := "<" + unknown + "> 550 5.1.1 <" + unknown + ">: Recipient address rejected: User unknown in virtual mailbox table"
	if partly.Level != "warn" || len(partly.Delivered) != 1 || partly.Delivered[0] != ops ||
		len(partly.Refused) != 1 || partly.Refused[0] != want {
		t.Errorf("notification_partly_delivered: %+v; want at warn, delivered to %s, refused %q", partly, ops, want)
	}
	if strings.Contains(s.proc.out.String(), `"notification abandoned"`) {
		t.Errorf("the notification was abandoned; Caddy's log:\n%s", s.proc.out)
	}
}

// Caddy sends a notify email's username and password only to a server
// that asks for them, and never in the clear to one that is not local:
// Postfix without authentication (smtpd_sasl_auth_enable=no), or one
// offering AUTH only over TLS (smtpd_tls_auth_only) to a tls none
// client, is not sent AUTH, nor is one offering no STARTTLS to a
// starttls client. Each delivery is abandoned at its first attempt, as
// no retry changes the server's settings, with one log line
// (notification_abandoned) saying why, without the password; Postfix
// counts no AUTH command in the session, and delivers no mail.
func TestANotifyEmailsCredentialsAreNotSentToAPostfixThatDoesNotAskForThem(t *testing.T) {
	const (
		profile  = "mta"
		password = "smtp-password-e2e-never-sent"
	)
	rcpt := "ops@example.com"
	tests := []struct {
		name   string
		tls    string        // the destination's
		server postfixConfig // which STARTTLS and AUTH Postfix offers
		want   string        // in the abandoned notification's reason
	}{
		{name: "Postfix without authentication, over STARTTLS", tls: "starttls",
			want: "AUTH: the server does not offer authentication (no AUTH in its EHLO answer); the username and password were not sent"},
		{name: "Postfix offering AUTH only over TLS, to a tls none client on localhost", tls: "none",
			server: postfixConfig{username: "acme", password: password},
			want:   "AUTH: the server does not offer authentication"},
		{name: "Postfix without STARTTLS, to a starttls client", tls: "starttls", server: postfixConfig{noTLS: true},
			want: "the server does not offer STARTTLS"},
	}
	needPostfix(t)
	caddy := buildCaddy(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pki := makeTestPKI(t, t.TempDir(), "Test Mail CA", "localhost", "smtpd")
			cfg := tc.server
			cfg.certFile, cfg.keyFile, cfg.recipients = pki.certFile, pki.keyFile, []string{rcpt}
			mta := startPostfix(t, cfg)
			s := startCertbotServer(t, caddy, "", certbotSite{
				profile: profile,
				body: fmt.Sprintf("notify email {\n smtp localhost:%d\n tls %s\n from acme@example.net\n to %s\n"+
					" username acme\n password {env.SMTP_PASSWORD}\n events account_created\n}", mta.port, tc.tls, rcpt),
				env: []string{"SSL_CERT_FILE=" + pki.caFile, "SMTP_PASSWORD=" + password},
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			registerAccount(ctx, t, s) // account_created

			var abandoned struct {
				Reason   string `json:"reason"`
				Attempts int    `json:"attempts"`
			}
			for deadline := time.Now().Add(20 * time.Second); abandoned.Reason == ""; time.Sleep(100 * time.Millisecond) {
				for l := range strings.Lines(s.proc.out.String()) {
					if strings.Contains(l, `"notification abandoned"`) {
						if err := json.Unmarshal([]byte(l), &abandoned); err != nil {
							t.Fatalf("the notification_abandoned line: %v: %s", err, l)
						}
					}
				}
				if abandoned.Reason == "" && time.Now().After(deadline) {
					t.Fatalf("no notification was abandoned within 20 s; Caddy's log:\n%s", s.proc.out)
				}
			}
			if !strings.Contains(abandoned.Reason, tc.want) || abandoned.Attempts != 1 {
				t.Errorf("abandoned after %d attempts: %q; want at the first with %q", abandoned.Attempts, abandoned.Reason, tc.want)
			}
			// Postfix logs each session's commands as it ends:
			// "disconnect from localhost[127.0.0.1] ehlo=2 starttls=1
			// auth=0/1 quit=1 commands=4/5".
			var session string
			for deadline := time.Now().Add(10 * time.Second); session == ""; time.Sleep(100 * time.Millisecond) {
				for l := range strings.Lines(mta.log.String()) {
					if strings.Contains(l, "disconnect from ") {
						session = strings.TrimSpace(l)
					}
				}
				if session == "" && time.Now().After(deadline) {
					t.Fatalf("Postfix logged no session's end within 10 s")
				}
			}
			if strings.Contains(session, " auth=") {
				t.Errorf("Postfix was sent AUTH: %s", session)
			}
			if entries, _ := os.ReadDir(filepath.Join(mta.mail, rcpt, "new")); len(entries) != 0 {
				t.Errorf("Postfix delivered %d mails; want none", len(entries))
			}
			if strings.Contains(s.proc.out.String(), password) {
				t.Errorf("Caddy's log carries the SMTP password")
			}
		})
	}
}

// registerAccount registers an account at s's profile and returns its
// client.
func registerAccount(ctx context.Context, t *testing.T, s certbotServer) *xacme.Client {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(s.root)
	c := &xacme.Client{Key: key, DirectoryURL: s.server, HTTPClient: &http.Client{
		Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}}
	if _, err := c.Register(ctx, &xacme.Account{}, xacme.AcceptTOS); err != nil {
		t.Fatalf("register: %v", err)
	}
	return c
}

// issueOverHTTP01 registers an account at s's profile, has name
// validated over http-01 (its key authorization served from wellKnown)
// and returns the issued leaf.
func issueOverHTTP01(ctx context.Context, t *testing.T, s certbotServer, wellKnown, name string) *x509.Certificate {
	t.Helper()
	c := registerAccount(ctx, t, s)
	order, err := c.AuthorizeOrder(ctx, xacme.DomainIDs(name))
	if err != nil {
		t.Fatalf("new order: %v", err)
	}
	for _, u := range order.AuthzURLs {
		z, err := c.GetAuthorization(ctx, u)
		if err != nil {
			t.Fatalf("authorization: %v", err)
		}
		var chal *xacme.Challenge
		for _, ch := range z.Challenges {
			if ch.Type == "http-01" {
				chal = ch
			}
		}
		if chal == nil {
			t.Fatalf("no http-01 challenge for %s", z.Identifier.Value)
		}
		keyAuth, err := c.HTTP01ChallengeResponse(chal.Token)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wellKnown, chal.Token), []byte(keyAuth), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Accept(ctx, chal); err != nil {
			t.Fatalf("accept: %v", err)
		}
		if _, err := c.WaitAuthorization(ctx, z.URI); err != nil {
			t.Fatalf("authorization of %s: %v", name, err)
		}
	}
	order, err = c.WaitOrder(ctx, order.URI)
	if err != nil {
		t.Fatalf("order: %v", err)
	}
	chain, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csrFor(t, name), true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// postfixMTA is a Postfix the test started.
type postfixMTA struct {
	port int         // its smtpd's, on 127.0.0.1
	mail string      // virtual(8)'s base: a maildir per recipient, named after it
	log  *syncBuffer // what it logged (maillog_file)
}

// postfixConfig is what startPostfix serves.
type postfixConfig struct {
	certFile, keyFile string   // smtpd's certificate and key, for STARTTLS
	recipients        []string // at example.com, each given a maildir
	// implicit makes smtpd speak TLS from the first byte (SMTPS,
	// smtpd_tls_wrappermode) rather than offer STARTTLS.
	implicit bool
	// username, when set, makes smtpd take mail only from a client that
	// authenticated as it with password (Cyrus SASL, from a sasldb),
	// over TLS; else smtpd offers no AUTH (smtpd_sasl_auth_enable=no).
	username, password string
	// mechs is the SASL mechanisms smtpd offers (Cyrus's mech_list);
	// "": PLAIN LOGIN.
	mechs string
	// noTLS makes smtpd offer no STARTTLS (smtpd_tls_security_level=none).
	noTLS bool
}

// startPostfix starts Debian's Postfix from a main.cf and master.cf of
// its own in a temporary directory: one smtpd on 127.0.0.1 offering
// STARTTLS (or speaking TLS at once), and virtual(8) delivering each
// recipient to a maildir. On cleanup it is stopped with `postfix stop`,
// and none of its processes may be left.
//
// Its main.cf refuses an EHLO name that is not fully qualified, as
// submission relays often do.
func startPostfix(t *testing.T, cfg postfixConfig) postfixMTA {
	t.Helper()
	bin := needPostfix(t)
	owner, err := user.Lookup("postfix")
	if err != nil {
		t.Fatalf("the postfix user, which Debian's package creates: %v", err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}

	// Postfix's daemons, as the postfix user, and virtual(8), as nobody,
	// must reach the queue and the maildirs.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf, queue, data, mailBase := filepath.Join(dir, "conf"), filepath.Join(dir, "queue"), filepath.Join(dir, "data"), filepath.Join(dir, "mail")
	for _, d := range []struct {
		path     string
		uid, gid string
	}{{conf, "0", "0"}, {queue, "0", "0"}, {data, owner.Uid, owner.Gid}, {mailBase, nobody.Uid, nobody.Gid}} {
		if err := os.Mkdir(d.path, 0o755); err != nil {
			t.Fatal(err)
		}
		uid, err := strconv.Atoi(d.uid)
		if err != nil {
			t.Fatal(err)
		}
		gid, err := strconv.Atoi(d.gid)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d.path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	var mailboxes strings.Builder
	for _, r := range cfg.recipients {
		fmt.Fprintf(&mailboxes, "%s %s/\n", r, r)
	}
	port := freePort(t)
	mainCF := fmt.Sprintf(`compatibility_level = 3.6
queue_directory = %[1]s
data_directory = %[2]s
command_directory = /usr/sbin
daemon_directory = /usr/lib/postfix/sbin
meta_directory = /etc/postfix
shlib_directory = /usr/lib/postfix
mail_owner = postfix
setgid_group = postdrop
maillog_file = /dev/stdout
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = mta.test
mydestination =
mynetworks = 127.0.0.0/8
alias_maps =
alias_database =
virtual_mailbox_domains = example.com
virtual_mailbox_base = %[3]s
virtual_mailbox_maps = texthash:%[4]s/mailboxes
virtual_uid_maps = static:%[5]s
virtual_gid_maps = static:%[6]s
smtpd_tls_security_level = may
smtpd_tls_cert_file = %[7]s
smtpd_tls_key_file = %[8]s
smtpd_tls_received_header = yes
smtpd_helo_required = yes
smtpd_helo_restrictions = reject_non_fqdn_helo_hostname, reject_invalid_helo_hostname
`, queue, data, mailBase, conf, nobody.Uid, nobody.Gid, cfg.certFile, cfg.keyFile)
	if cfg.username != "" {
		mainCF += postfixSASL(t, conf, owner, cfg.username, cfg.password, cfg.mechs)
	} else {
		mainCF += "smtpd_sasl_auth_enable = no\n"
	}
	if cfg.noTLS {
		mainCF += "smtpd_tls_security_level = none\n"
	}
	// Debian's master.cf, its smtpd on the test's port, nothing chrooted.
	smtpd := "smtpd"
	if cfg.implicit {
		smtpd += " -o smtpd_tls_wrappermode=yes -o smtpd_tls_security_level=encrypt"
	}
	masterCF := fmt.Sprintf(`127.0.0.1:%d inet n - n - - %s
pickup    unix  n - n 60    1 pickup
cleanup   unix  n - n -     0 cleanup
qmgr      unix  n - n 300   1 qmgr
tlsmgr    unix  - - n 1000? 1 tlsmgr
rewrite   unix  - - n -     - trivial-rewrite
bounce    unix  - - n -     0 bounce
defer     unix  - - n -     0 bounce
trace     unix  - - n -     0 bounce
verify    unix  - - n -     1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n -     - proxymap
smtp      unix  - - n -     - smtp
relay     unix  - - n -     - smtp
showq     unix  n - n -     - showq
error     unix  - - n -     - error
retry     unix  - - n -     - error
discard   unix  - - n -     - discard
local     unix  - n n -     - local
virtual   unix  - n n -     - virtual
lmtp      unix  - - n -     - lmtp
anvil     unix  - - n -     1 anvil
scache    unix  - - n -     1 scache
postlog   unix-dgram n - n - 1 postlogd
`, port, smtpd)
	for file, text := range map[string]string{"main.cf": mainCF, "master.cf": masterCF, "mailboxes": mailboxes.String()} {
		if err := os.WriteFile(filepath.Join(conf, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// start-fg keeps postfix-script in the foreground until the master
	// exits; the master, in a session of its own, is stopped below.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", conf, "start-fg")
	inOwnGroup(cmd)
	out := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("postfix start-fg: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	master := 0
	t.Cleanup(func() {
		if stop, err := exec.Command(bin, "-c", conf, "stop").CombinedOutput(); err != nil {
			t.Errorf("postfix stop: %v\n%s", err, stop)
		}
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			t.Errorf("postfix did not exit within 15 s of postfix stop")
		}
		cancel()
		<-exited
		if master != 0 && !groupGone(-master, 10*time.Second) {
			_ = syscall.Kill(-master, syscall.SIGKILL)
			t.Errorf("Postfix's processes (group %d) outlived postfix stop", master)
		}
		if t.Failed() {
			t.Logf("postfix main.cf:\n%s\npostfix log:\n%s", mainCF, out)
		}
	})

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("postfix exited before its smtpd listened on %s:\n%s", addr, out)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("postfix's smtpd did not listen on %s within 15 s:\n%s", addr, out)
		}
	}
	pid, err := os.ReadFile(filepath.Join(queue, "pid", "master.pid"))
	if err != nil {
		t.Fatalf("postfix's master.pid: %v", err)
	}
	if master, err = strconv.Atoi(strings.TrimSpace(string(pid))); err != nil {
		t.Fatalf("postfix's master.pid: %v", err)
	}
	return postfixMTA{port: port, mail: mailBase, log: out}
}

// needPostfix returns postfix's path, or skips the test (fails it under
// ACMEPROXY_E2E=1) where Postfix cannot run: not installed, or not root.
// Postfix's master runs only as root (`postfix start` exits 1 for any
// other user); CI runs as root.
func needPostfix(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		needEnvironment(t, "Postfix's master runs only as root (postfix start refuses any other user); run this test as root")
	}
	return needTool(t, "postfix", "install it with `apt-get install --no-install-recommends postfix`")
}

// postfixSASL readies Cyrus SASL for Postfix's smtpd in conf: a sasldb
// holding username and password, read by smtpd as the postfix user
// owner, and the smtpd.conf that names it, in conf/sasl, where Debian's
// Postfix has Cyrus look (cyrus_sasl_config_path is not read). It
// returns the lines of main.cf that make smtpd take mail only from a
// client that authenticated, over TLS.
func postfixSASL(t *testing.T, conf string, owner *user.User, username, password, mechs string) string {
	t.Helper()
	hint := "install it with `apt-get install --no-install-recommends sasl2-bin libsasl2-modules`"
	saslpasswd2 := needTool(t, "saslpasswd2", hint)
	if mechs == "" {
		mechs = "PLAIN LOGIN"
	}
	for _, mech := range strings.Fields(mechs) {
		lib := "lib" + strings.ToLower(mech) + ".so*"
		if found, _ := filepath.Glob("/usr/lib/*/sasl2/" + lib); len(found) == 0 {
			needEnvironment(t, "Cyrus SASL's "+mech+" mechanism ("+lib+" of libsasl2-modules) is missing; "+hint)
		}
	}
	const realm = "mta.test" // Postfix's myhostname
	dir := filepath.Join(conf, "sasl")
	db := filepath.Join(dir, "sasldb2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	smtpdConf := fmt.Sprintf("pwcheck_method: auxprop\nauxprop_plugin: sasldb\nmech_list: %s\nsasldb_path: %s\n", mechs, db)
	if err := os.WriteFile(filepath.Join(dir, "smtpd.conf"), []byte(smtpdConf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(saslpasswd2, "-f", db, "-c", "-p", "-u", realm, username)
	cmd.Stdin = strings.NewReader(password)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("saslpasswd2: %v\n%s", err, out)
	}
	uid, err := strconv.Atoi(owner.Uid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(db, uid, -1); err != nil {
		t.Fatal(err)
	}
	return `smtpd_sasl_auth_enable = yes
smtpd_sasl_type = cyrus
smtpd_sasl_path = smtpd
smtpd_sasl_local_domain = ` + realm + `
smtpd_sasl_authenticated_header = yes
smtpd_tls_auth_only = yes
smtpd_recipient_restrictions = permit_sasl_authenticated, reject
`
}

// groupGone waits until no process is left in process group -pgid.
func groupGone(pgid int, within time.Duration) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if err := syscall.Kill(pgid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// waitMessage waits for the one message delivered to rcpt's maildir.
func (m postfixMTA) waitMessage(t *testing.T, rcpt string, within time.Duration) *mail.Message {
	t.Helper()
	dir := filepath.Join(m.mail, rcpt, "new")
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		entries, _ := os.ReadDir(dir)
		if len(entries) > 1 {
			t.Fatalf("%s got %d messages; want one", rcpt, len(entries))
		}
		if len(entries) == 1 {
			f, err := os.Open(filepath.Join(dir, entries[0].Name()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			msg, err := mail.ReadMessage(f)
			if err != nil {
				t.Fatalf("the message delivered to %s: %v", rcpt, err)
			}
			return msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message was delivered to %s within %s", rcpt, within)
		}
	}
}
