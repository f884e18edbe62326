package notify_test

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A server's answer is kept in the job's error, and may quote what it
// was sent: sendmail's "500 5.5.1 Command unrecognized" repeats the
// command, and a careless server's refusal the credentials. The SMTP
// password reaches neither the job's error nor a log line, in clear or
// as AUTH PLAIN encoded it; the username, which names the account and
// is written in the config, may.
func TestAnSMTPAnswerQuotingTheAUTHCommandDoesNotCarryThePassword(t *testing.T) {
	const user, password = "acme-mailer", "pw-CANARY-4711"
	plain := base64.StdEncoding.EncodeToString([]byte("\x00" + user + "\x00" + password))
	tests := []struct {
		name      string
		mechs     string // the server's AUTH offer; "": PLAIN
		reply     func(arg string) string
		permanent bool
	}{
		{name: "fail/a 535 to LOGIN quoting the answers to its prompts", mechs: "LOGIN", reply: func(arg string) string {
			return "535 5.7.8 Authentication failed: " + arg
		}, permanent: true},
		{"fail/a 500 repeating the command, as sendmail does", "", func(arg string) string {
			return fmt.Sprintf(`500 5.5.1 Command unrecognized: "AUTH %s"`, arg)
		}, true},
		{"fail/a 535 quoting the encoded credentials", "", func(arg string) string {
			return "535 5.7.8 Authentication failed for " + arg
		}, true},
		{"fail/a 454 quoting the decoded credentials", "", func(arg string) string {
			_, b64, _ := strings.Cut(arg, " ")
			raw, _ := base64.StdEncoding.DecodeString(b64)
			return "454 4.7.0 Temporary authentication failure: " + strings.ReplaceAll(string(raw), "\x00", " ")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, false)
			srv.authReply = tt.reply
			srv.authMechs = tt.mechs
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com",
				To: []string{"ops@example.com"}, Username: user, Password: password}
			r := newRig(t, notify.Options{TLS: &tls.Config{RootCAs: srv.certs}}, dst)
			ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
			j := r.wait(t, ids[0])
			if j.Status != store.JobFailed || !strings.Contains(j.LastError, "AUTH: ") {
				t.Fatalf("job %s after %d attempts (%s); want failed at AUTH", j.Status, j.Attempts, j.LastError)
			}
			if tt.permanent != (j.Attempts == 1) {
				t.Errorf("job failed after %d attempts; want permanent %v", j.Attempts, tt.permanent)
			}
			if srv.authCount() == 0 {
				t.Fatal("the server was sent no AUTH: the test does not exercise it")
			}
			seen := map[string]string{"the job's last error": j.LastError}
			for i, e := range r.logs.All() {
				seen[fmt.Sprintf("log line %d", i)] = fmt.Sprintf("%s %v", e.Message, e.ContextMap())
			}
			for what, text := range seen {
				for _, secret := range []string{password, plain, base64.StdEncoding.EncodeToString([]byte(password))} {
					if strings.Contains(text, secret) {
						t.Errorf("%s holds the password (%q): %s", what, secret, text)
					}
				}
			}
		})
	}
}
