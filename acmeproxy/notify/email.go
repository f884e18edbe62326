package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"mime/quotedprintable"
	"net"
	"net/smtp"
	"net/textproto"
	"os"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// email sends the event as a plain-text mail. SMTP 5xx answers, a
// server without the STARTTLS it was required to offer, and one not
// asking by AUTH PLAIN or LOGIN for the credentials configured are
// permanent; 4xx answers and connection failures are retried. Each
// recipient is asked for at RCPT TO: the mail goes to those accepted
// (a *partialError names the others); when none is, the attempt is
// retried if one refusal was 4xx, and is permanent if all were 5xx.
func (d *Deliverer) email(ctx context.Context, dst Destination, ev Event) (err error) {
	host, _, _ := net.SplitHostPort(dst.SMTP)
	var tlsCfg *tls.Config
	if d.opts.TLS != nil {
		tlsCfg = d.opts.TLS.Clone()
	} else {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsCfg.ServerName = host

	// timedOut says a step ran out of the attempt's time: what it was
	// left with (the connection's deadline, the attempt's, as "i/o
	// timeout", or "use of closed network connection" where the
	// connection was closed at the timeout) does not say so.
	// It is nil for another failure.
	timedOut := func(step string, err error) error {
		if te := (*textproto.Error)(nil); errors.As(err, &te) {
			return nil // the server's answer, in time
		}
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return redactedError{err: err, text: fmt.Sprintf("%s: timed out after %s", step, d.opts.Timeout)}
		}
		return nil
	}

	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", dst.SMTP)
	if err != nil {
		if te := timedOut("connect", err); te != nil {
			return te
		}
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dst.TLS == TLSImplicit {
		tc := tls.Client(conn, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			if te := timedOut("TLS", err); te != nil {
				return te
			}
			return fmt.Errorf("TLS: %w", err)
		}
		conn = tc
	}
	hide := credentialHider(dst)
	fail := func(step string, err error) error {
		if te := timedOut(step, err); te != nil {
			return te
		}
		return smtpError(step, err, hide)
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return fail("greeting", err)
	}
	defer c.Close()
	hostname, _ := os.Hostname()
	if err := c.Hello(heloName(dst.HELO, hostname, conn.LocalAddr())); err != nil {
		return fail("EHLO", err)
	}
	if dst.TLS == "" || dst.TLS == TLSStartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return permanent(errors.New("the server does not offer STARTTLS (set tls implicit or none)"))
		}
		if err := c.StartTLS(tlsCfg); err != nil {
			if te := timedOut("STARTTLS", err); te != nil {
				return te
			}
			if te := (*textproto.Error)(nil); errors.As(err, &te) {
				return redactedError{err: err, text: "STARTTLS: " + smtpReply(te, hide)}
			}
			return fmt.Errorf("STARTTLS: %w", err)
		}
	}
	if dst.Username != "" {
		if err := authenticate(c, dst, host); err != nil {
			if pe := (*permanentError)(nil); errors.As(err, &pe) {
				return err
			}
			return fail("AUTH", err)
		}
	}
	if err := c.Mail(dst.From); err != nil {
		return fail("MAIL FROM", err)
	}
	// Each recipient is asked for on its own: one refused does not keep
	// the mail from the others. A refusal is a reply; a connection
	// lost or timed out fails the attempt, retried whole.
	var accepted, refused []string
	temporary := false
	for _, to := range dst.To {
		err := c.Rcpt(to)
		if err == nil {
			accepted = append(accepted, to)
			continue
		}
		te := (*textproto.Error)(nil)
		if !errors.As(err, &te) {
			return fail("RCPT TO", err)
		}
		temporary = temporary || te.Code < 500
		refused = append(refused, "<"+oneLine(to)+"> "+smtpReply(te, hide))
	}
	if len(accepted) == 0 {
		err := fmt.Errorf("RCPT TO: every recipient was refused: %s", strings.Join(refused, "; "))
		if temporary {
			return err // a 4xx among them: the server may take it later
		}
		return permanent(err)
	}
	w, err := c.Data()
	if err != nil {
		return fail("DATA", err)
	}
	if _, err := w.Write(mailMessage(dst, ev, time.Now())); err != nil {
		return fail("DATA", err)
	}
	if err := w.Close(); err != nil {
		return fail("DATA", err)
	}
	_ = c.Quit()
	if len(refused) > 0 {
		return &partialError{delivered: accepted, refused: refused}
	}
	return nil
}

// partialError is a mail delivered to some of its recipients, refused
// for the others at RCPT TO. It is not retried: the job cannot narrow
// its recipients, and a retry would send the mail again to those who
// have it.
type partialError struct {
	delivered []string
	refused   []string // "<address> code first line of the reply"
}

func (e *partialError) Error() string {
	return fmt.Sprintf("delivered to %s; refused at RCPT TO: %s",
		strings.Join(e.delivered, ", "), strings.Join(e.refused, "; "))
}

// maxReply bounds the text of a server's reply in an error: the reply
// is outside text, of any length and as many lines as the server
// likes, and the error goes into a log line whole.
const maxReply = 200

// smtpReply renders a server's reply as its code and its first line,
// the password taken out (before the cut, so no piece of it is left)
// and cut to maxReply bytes: "550 5.1.1 <x@example.com>: Recipient
// address rejected".
func smtpReply(te *textproto.Error, hide *strings.Replacer) string {
	first, _, _ := strings.Cut(te.Msg, "\n")
	return textcut.Clip(fmt.Sprintf("%03d %s", te.Code, oneLine(hide.Replace(first))), maxReply, "…")
}

// heloName is the name the client gives in EHLO: the destination's helo
// when set; else the machine's host name when it is fully qualified, as
// Postfix's myhostname and sendmail's $j default to; else the address
// literal of the connection's own end ("[192.0.2.1]"), which RFC 5321
// 4.1.4 says a client without a domain name sends. Never a bare name
// such as "localhost": servers that refuse a HELO not fully qualified
// (Postfix's reject_non_fqdn_helo_hostname, common on submission
// relays) would refuse every mail.
func heloName(configured, hostname string, local net.Addr) string {
	if configured != "" {
		return configured
	}
	if h := strings.TrimSuffix(hostname, "."); isFQDN(h) {
		return h
	}
	if a, ok := local.(*net.TCPAddr); ok && a.IP != nil {
		if v4 := a.IP.To4(); v4 != nil {
			return "[" + v4.String() + "]"
		}
		return "[IPv6:" + a.IP.String() + "]"
	}
	return "[127.0.0.1]"
}

// isDomainName reports whether s is a host name as DNS writes one:
// dot-separated labels of letters, digits and inner hyphens, each of 1
// to 63 characters, 253 in all.
func isDomainName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// isFQDN reports whether s (without a root dot) is a fully qualified
// domain name: a domain name of two labels or more whose last, a
// top-level domain, is not all digits (so "192.0.2.1" is not one).
func isFQDN(s string) bool {
	i := strings.LastIndexByte(s, '.')
	if i < 0 || !isDomainName(s) {
		return false
	}
	return strings.ContainsFunc(s[i+1:], func(r rune) bool { return r < '0' || r > '9' })
}

// isAddressLiteral reports whether s is an RFC 5321 address literal:
// "[192.0.2.1]" or "[IPv6:2001:db8::1]".
func isAddressLiteral(s string) bool {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return false
	}
	inner := s[1 : len(s)-1]
	if v6, ok := strings.CutPrefix(inner, "IPv6:"); ok {
		return strings.Contains(v6, ":") && net.ParseIP(v6) != nil
	}
	ip := net.ParseIP(inner)
	return ip != nil && ip.To4() != nil && !strings.Contains(inner, ":")
}

// smtpError classifies an SMTP failure: a 5xx reply is permanent. The
// server's text is kept, and none of ours: it may name the username (as
// in "Authentication failed for <user>"), which the config writes in the
// clear. It may also quote what it was sent — sendmail's "500 5.5.1
// Command unrecognized" repeats the command, AUTH PLAIN's credentials
// too — so hide takes the password out of it first.
func smtpError(step string, err error, hide *strings.Replacer) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 {
		return permanent(redactedError{err: err, text: step + ": " + smtpReply(te, hide)})
	}
	if errors.As(err, &te) {
		return redactedError{err: err, text: step + ": " + smtpReply(te, hide)}
	}
	return redactedError{err: err, text: step + ": " + hide.Replace(err.Error())}
}

// credentialHider replaces the destination's password in a server's
// text, in each form the server was sent it or may quote it: as
// configured, and base64-encoded, alone (as AUTH LOGIN answers its
// password prompt) and as the AUTH PLAIN initial response
// ("\x00user\x00password") that net/smtp sends.
func credentialHider(dst Destination) *strings.Replacer {
	if dst.Password == "" {
		return strings.NewReplacer()
	}
	const shown = "[password]"
	plain := "\x00" + dst.Username + "\x00" + dst.Password
	var pairs []string
	for _, form := range []string{plain, dst.Password} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
			pairs = append(pairs, enc.EncodeToString([]byte(form)), shown)
		}
	}
	// Longest first (strings.Replacer tries its pairs in order at each
	// position): the encoded forms hold no clear password, but the
	// clear one may be a piece of an encoded one.
	pairs = append(pairs, dst.Password, shown)
	return strings.NewReplacer(pairs...)
}

// redactedError is an error whose text is its cause's, redacted;
// errors.Is and errors.As still see the cause.
type redactedError struct {
	err  error
	text string
}

func (e redactedError) Error() string { return e.text }
func (e redactedError) Unwrap() error { return e.err }

// mailMessage is the RFC 5322 message of an event: a subject naming the
// event, the profile and the first identifier, and a plain-text body,
// quoted-printable: a detail may be longer than a mail's 998-octet line
// (an audit row keeps 1 KiB) or hold UTF-8, which a server without
// 8BITMIME may not be sent as it is.
func mailMessage(dst Destination, ev Event, now time.Time) []byte {
	var b bytes.Buffer
	subject := "[acme_proxy] " + ev.Event + " (" + ev.Profile + ")"
	if len(ev.Identifiers) > 0 {
		subject += ": " + ev.Identifiers[0].Value
		if len(ev.Identifiers) > 1 {
			subject += fmt.Sprintf(" and %d more", len(ev.Identifiers)-1)
		}
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, oneLine(v)) }
	header("From", dst.From)
	header("To", strings.Join(dst.To, ", "))
	header("Subject", subject)
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", "<"+hex.EncodeToString(id[:])+"@acme-proxy>")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	body := quotedprintable.NewWriter(&b)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(body, "%-15s %s\r\n", k+":", oneLine(v))
		}
	}
	line("event", ev.Event)
	line("profile", ev.Profile)
	line("time", ev.Time.UTC().Format(time.RFC3339))
	for _, id := range ev.Identifiers {
		line("identifier", id.Type+" "+id.Value)
	}
	line("order", ev.Order)
	line("account", ev.Account)
	line("serial", ev.Serial)
	line("reason", ev.Reason)
	line("detail", ev.Detail)
	line("client address", ev.ClientAddress)
	_ = body.Close() // a bytes.Buffer takes every write
	return b.Bytes()
}

// oneLine keeps a value on its line: no header or body injection.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}
