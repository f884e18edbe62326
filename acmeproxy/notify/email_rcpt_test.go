package notify_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// A recipient the server refuses at RCPT TO does not keep the mail from
// the others: it goes to those accepted, the delivery is done (a retry
// would mail them again) and one warn line (notification_partly_delivered)
// names the refused with the server's reply. When every recipient is
// refused the delivery is abandoned if all refusals were 5xx, and
// retried if one was 4xx (a full mailbox, a greylisting, "452 too many
// recipients"), as the server may take it later.
func TestAnEmailRefusedForOneRecipientStillGoesToTheOthers(t *testing.T) {
	const ops, sec = "ops@example.com", "sec@example.com"
	tests := []struct {
		name      string
		replies   map[string]string // RCPT TO refusals, by address
		outcome   string            // the attempt's
		delivered []string          // the envelope of the one mail; nil: none
		want      []string          // in the failure, or in the warn line's refused
	}{
		{name: "ok/one of two refused with 550: mailed to the other, the refused named",
			replies: map[string]string{sec: "550 5.1.1 <sec@example.com>: Recipient address rejected: User unknown"},
			outcome: "done", delivered: []string{ops},
			want: []string{"<sec@example.com> 550 5.1.1 <sec@example.com>: Recipient address rejected: User unknown"}},
		{name: "ok/one of two refused with 450: mailed to the other, not retried",
			replies: map[string]string{ops: "450 4.2.2 mailbox full"},
			outcome: "done", delivered: []string{sec}, want: []string{"<ops@example.com> 450 4.2.2 mailbox full"}},
		{name: "fail/both refused with 5xx: abandoned, both named",
			replies: map[string]string{ops: "550 5.1.1 no such user", sec: "553 5.7.1 relaying denied"},
			outcome: "failed",
			want:    []string{"RCPT TO: every recipient was refused: <ops@example.com> 550 5.1.1 no such user; <sec@example.com> 553 5.7.1 relaying denied"}},
		{name: "fail/both refused, one with 4xx: retried",
			replies: map[string]string{ops: "550 5.1.1 no such user", sec: "452 4.5.3 too many recipients"},
			outcome: "retry",
			want:    []string{"<ops@example.com> 550 5.1.1 no such user; <sec@example.com> 452 4.5.3 too many recipients"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, false)
			srv.rcptReply = tt.replies
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com", To: []string{ops, sec}}
			core, logs := observer.New(zap.DebugLevel)
			d := notify.NewDeliverer(notify.Options{Logger: zap.New(core), TLS: &tls.Config{RootCAs: srv.certs}})
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			job := &jobs.Job{ID: 7, Kind: notify.Kind, Attempts: 1,
				Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventCertificateIssued))[0].Payload}
			out := d.Run(context.Background(), job)
			if out.Kind() != tt.outcome {
				t.Fatalf("outcome %s; want %s", out, tt.outcome)
			}
			mails := srv.received()
			switch {
			case tt.delivered == nil && len(mails) != 0:
				t.Errorf("the server got %d mails; want none", len(mails))
			case tt.delivered != nil && (len(mails) != 1 || strings.Join(mails[0].to, ",") != strings.Join(tt.delivered, ",")):
				t.Errorf("the server got %+v; want one mail to %v", mails, tt.delivered)
			}
			text := out.String()
			if tt.outcome == "done" {
				warns := logs.FilterField(zap.String("event", "notification_partly_delivered")).All()
				if len(warns) != 1 || warns[0].Level != zap.WarnLevel {
					t.Fatalf("%d notification_partly_delivered lines; want one at warn: %v", len(warns), logs.All())
				}
				text = fmt.Sprint(warns[0].ContextMap())
				if got := fmt.Sprint(warns[0].ContextMap()["delivered"]); got != fmt.Sprint(tt.delivered) {
					t.Errorf("the line's delivered is %s; want %v", got, tt.delivered)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("%s\nlacks %q", text, w)
				}
			}
		})
	}
}

// A server's reply is outside text, of any length and lines: the job's
// error, and the log line that carries it whole, keep its code and its
// first line, cut to 200 bytes and marked, the password taken out
// before the cut.
func TestAnSMTPReplyInAnErrorIsItsCodeAndFirstLineCut(t *testing.T) {
	long := strings.Repeat("x", 500)
	tests := []struct {
		name   string
		reply  string // to RCPT TO, as the server sends it
		want   string // the whole of what follows "refused: "
		absent string
	}{
		{name: "fail/a multi-line reply keeps its first line",
			reply: "550-5.7.1 Service unavailable; client blocked\r\n550-5.7.1 see https://example.net/policy\r\n550 5.7.1 line three",
			want:  "<ops@example.com> 550 5.7.1 Service unavailable; client blocked", absent: "policy"},
		{name: "fail/a long reply is cut to 200 bytes and marked",
			reply: "550 5.1.1 " + long,
			want:  "<ops@example.com> " + ("550 5.1.1 " + long)[:200-len("…")] + "…"},
		{name: "fail/a cut never leaves a piece of the password",
			reply: "550 5.1.1 " + strings.Repeat("y", 185) + "pw-CANARY-9" + long,
			want:  "<ops@example.com> " + ("550 5.1.1 " + strings.Repeat("y", 185) + "[password]")[:200-len("…")] + "…", absent: "ypw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, false)
			srv.rcptReply = map[string]string{"ops@example.com": tt.reply}
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com",
				To: []string{"ops@example.com"}, Username: "acme", Password: "pw-CANARY-9"}
			d := notify.NewDeliverer(notify.Options{TLS: &tls.Config{RootCAs: srv.certs}})
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			job := &jobs.Job{ID: 7, Kind: notify.Kind, Attempts: 1,
				Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventCertificateIssued))[0].Payload}
			out := d.Run(context.Background(), job).String()
			_, got, ok := strings.Cut(out, "every recipient was refused: ")
			if !ok || got != tt.want {
				t.Errorf("outcome %q\nwant the refusal %q", out, tt.want)
			}
			if tt.absent != "" && strings.Contains(out, tt.absent) {
				t.Errorf("outcome %q holds %q", out, tt.absent)
			}
		})
	}
}
