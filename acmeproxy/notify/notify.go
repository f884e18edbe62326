// Package notify tells operators about what the ACME server did: each
// event a destination subscribes to becomes a durable notify_deliver job,
// stored in the same transaction as the state change (and audit row) that
// owes it, and delivered by a webhook (HMAC-signed JSON), an e-mail over
// SMTP, or an operator's script.
//
// Destinations are identified in job payloads by ID, a hash of where they
// deliver and never of how they authenticate: no secret (HMAC key, header
// value, SMTP credentials, a URL's userinfo or query values) is written to
// the job table, which operators list through the admin API, nor anything
// derived from one; and a secret rotated by a config reload leaves the
// queued deliveries finding the destination, now with the new secret.
package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/mail"
	"net/textproto"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Kind is the job kind that delivers one event to one destination.
const Kind = "notify_deliver"

// Events lists every event, in a fixed order.
var Events = []string{acme.EventCertificateIssued, acme.EventCertificateIssueFailed, acme.EventCertificateRevoked,
	acme.EventAccountCreated, acme.EventAccountDeactivated, acme.EventChallengeFailed}

// Destination types.
const (
	TypeWebhook = "webhook"
	TypeEmail   = "email"
	TypeScript  = "script"
)

// SMTP transport security.
const (
	TLSStartTLS = "starttls" // plain connection upgraded by STARTTLS, which the server must offer (default)
	TLSImplicit = "implicit" // TLS from the first byte (SMTPS, usually port 465)
	TLSNone     = "none"     // no TLS: a local relay only; credentials only to localhost, 127.0.0.1 or ::1 (net/smtp refuses anything else, and so does Validate)
)

// Event is what happened; its JSON, with the delivery's id added (see
// eventJSON), is a webhook's body and a script's stdin.
type Event struct {
	Event       string            `json:"event"`
	Profile     string            `json:"profile"`
	Order       string            `json:"order,omitempty"`
	Account     string            `json:"account,omitempty"`
	Identifiers []acme.Identifier `json:"identifiers,omitempty"`
	Serial      string            `json:"serial,omitempty"`
	// Reason: a revocation's RFC 5280 reason code, a refusal's problem type.
	Reason string `json:"reason,omitempty"`
	// Detail: why an issuance or a challenge failed, for the operator.
	Detail        string    `json:"detail,omitempty"`
	ClientAddress string    `json:"client_address,omitempty"`
	Time          time.Time `json:"time"`
}

// Destination is one place notifications go, with its event filter. JSON
// of an entry of "notify" in the app's and a profile's config.
type Destination struct {
	// Type is webhook, email or script.
	Type string `json:"type"`
	// Events it receives; default all.
	Events []string `json:"events,omitempty"`

	// URL (webhook) receives a POST of the event's JSON.
	URL string `json:"url,omitempty"`
	// Secret (webhook), when set, signs the body: X-Acme-Proxy-Signature
	// is the lower-case hex HMAC-SHA256 of the body under it.
	Secret string `json:"secret,omitempty"`
	// Headers (webhook) are added to every request.
	Headers map[string]string `json:"headers,omitempty"`

	// SMTP (email) is the server's host:port.
	SMTP string `json:"smtp,omitempty"`
	// TLS (email) is starttls (default), implicit or none.
	TLS      string   `json:"tls,omitempty"`
	From     string   `json:"from,omitempty"`
	To       []string `json:"to,omitempty"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"password,omitempty"`
	// HELO (email) is the name given in EHLO: a fully qualified domain
	// name or an address literal ([192.0.2.1]), its placeholders
	// ({env.HOSTNAME}) replaced by the app's glue. Default: the
	// machine's host name when it is fully qualified, else the
	// connection's own address as a literal.
	HELO string `json:"helo,omitempty"`

	// Command (script) is the program run, without a shell, with Args;
	// it reads the event's JSON on stdin.
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// WrittenArgs is not config: the app's glue sets it to Args as the
	// config writes them, before their placeholders ({env.TOKEN}) were
	// replaced. The ID is made of them, so that it neither changes with
	// nor is made of what a placeholder holds (a token rotated in the
	// environment).
	WrittenArgs []string `json:"-"`

	// Scope is not config: the app's glue sets it to the profile whose
	// own notify list holds the destination ("" for the app's list), so
	// that two profiles may send to one receiver with different secrets.
	Scope string `json:"-"`
}

// Validate checks a destination; each message names the offending key.
func (d *Destination) Validate() error {
	for _, e := range d.Events {
		if !slices.Contains(Events, e) {
			return fmt.Errorf("notify %s: events: unknown event %q (want one of %s)", d.Type, e, strings.Join(Events, ", "))
		}
	}
	if err := d.checkOwnSettings(); err != nil {
		return err
	}
	switch d.Type {
	case TypeWebhook:
		u, err := url.Parse(d.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("notify webhook: url: must be an absolute http:// or https:// URL")
		}
		// What Go's HTTP client would refuse to send fails here: else
		// every delivery would fail before it left, and be retried for a
		// day. So does what would not be sent as configured: a header the
		// request sets itself (its value dropped or overwritten), and one
		// name given twice in another case (one value, either, sent). A
		// value is never quoted: it is often a token.
		names := slices.Sorted(maps.Keys(d.Headers))
		given := map[string]string{}
		for _, k := range names {
			if !httpguts.ValidHeaderFieldName(k) {
				return fmt.Errorf("notify webhook: header: %q is not a header name", k)
			}
			if !httpguts.ValidHeaderFieldValue(d.Headers[k]) {
				return fmt.Errorf("notify webhook: header %s: the value holds a control character (a line break?)", k)
			}
			ck := textproto.CanonicalMIMEHeaderKey(k)
			if slices.Contains(requestHeaders, ck) {
				return fmt.Errorf("notify webhook: header %s: is set by each request itself, not by the config", k)
			}
			if other, dup := given[ck]; dup {
				return fmt.Errorf("notify webhook: header %s: given twice, as %s too (header names ignore case)", k, other)
			}
			given[ck] = k
		}
	case TypeEmail:
		// A URL or a user ("smtp://acme:pw@host:587", as other tools take
		// it) is not quoted: it may hold the password, and a load's error
		// is logged.
		if strings.ContainsAny(d.SMTP, "@/") {
			return fmt.Errorf("notify email: smtp: must be host:port, not a URL nor user@host (the credentials go in username and password, the transport in tls)")
		}
		// The port as a dial would read it (a number, or a service's
		// name): one it refuses, or 0, fails every delivery.
		usable := false
		if _, port, err := net.SplitHostPort(d.SMTP); err == nil {
			p, err := net.LookupPort("tcp", port)
			usable = err == nil && p > 0
		}
		if !usable {
			return fmt.Errorf("notify email: smtp: %q must be host:port, the port from 1 to 65535", d.SMTP)
		}
		switch d.TLS {
		case "", TLSStartTLS, TLSImplicit, TLSNone:
		default:
			return fmt.Errorf("notify email: tls: %q must be starttls, implicit or none", d.TLS)
		}
		if a, err := mail.ParseAddress(d.From); err != nil || a.Address != d.From {
			return fmt.Errorf("notify email: from: %q is not an e-mail address", d.From)
		}
		if len(d.To) == 0 {
			return fmt.Errorf("notify email: to: at least one address required")
		}
		for _, to := range d.To {
			if a, err := mail.ParseAddress(to); err != nil || a.Address != to {
				return fmt.Errorf("notify email: to: %q is not an e-mail address", to)
			}
		}
		// RFC 5321 4.1.1.1 and 2.3.5: EHLO takes a fully qualified
		// domain name or an address literal. A bare name ("vm", what
		// {system.hostname} often is) is refused by relays checking it
		// (Postfix's reject_non_fqdn_helo_hostname), so every delivery.
		if h := strings.TrimSuffix(d.HELO, "."); d.HELO != "" && !isFQDN(h) && !isAddressLiteral(d.HELO) {
			if isDomainName(h) && !strings.Contains(h, ".") {
				return fmt.Errorf("notify email: helo: %q is not fully qualified (acme.example.com) nor an address literal ([192.0.2.1]): relays refuse a bare name", d.HELO)
			}
			return fmt.Errorf("notify email: helo: %q is not a domain name or an address literal ([192.0.2.1], [IPv6:2001:db8::1])", d.HELO)
		}
		if (d.Username == "") != (d.Password == "") {
			empty := "password"
			if d.Username == "" {
				empty = "username"
			}
			return fmt.Errorf("notify email: %s: empty while the other is set; username and password go together (a placeholder such as {env.SMTP_PASSWORD} is empty when its variable is unset)", empty)
		}
		// net/smtp sends credentials in clear to these names only, and
		// refuses anywhere else: every attempt would fail, for a day.
		if host, _, _ := net.SplitHostPort(d.SMTP); d.TLS == TLSNone && d.Username != "" &&
			host != "localhost" && host != "127.0.0.1" && host != "::1" {
			return fmt.Errorf("notify email: username: credentials are sent only over TLS; with tls none only to localhost, 127.0.0.1 or ::1, not %q (set tls starttls or implicit)", host)
		}
	case TypeScript:
		if d.Command == "" {
			return fmt.Errorf("notify script: a path is required")
		}
		// Whether the file exists and may run is Register's check, at
		// load: a config may be adapted on another machine.
		if !filepath.IsAbs(d.Command) {
			return fmt.Errorf("notify script: command: %q must be an absolute path", d.Command)
		}
	default:
		return fmt.Errorf("notify: type: unknown destination type %q (want webhook, email or script)", d.Type)
	}
	return nil
}

// checkOwnSettings refuses a setting of another type of destination (an
// smtp on a webhook): it would be ignored, and is most likely a mistake
// about which destination the operator is writing.
func (d *Destination) checkOwnSettings() error {
	owners := []struct {
		typ, key string
		set      bool
	}{
		{TypeWebhook, "url", d.URL != ""}, {TypeWebhook, "secret", d.Secret != ""}, {TypeWebhook, "headers", len(d.Headers) > 0},
		{TypeEmail, "smtp", d.SMTP != ""}, {TypeEmail, "tls", d.TLS != ""}, {TypeEmail, "from", d.From != ""},
		{TypeEmail, "to", len(d.To) > 0}, {TypeEmail, "username", d.Username != ""}, {TypeEmail, "password", d.Password != ""},
		{TypeEmail, "helo", d.HELO != ""},
		{TypeScript, "command", d.Command != ""}, {TypeScript, "args", len(d.Args) > 0},
	}
	known := false
	for _, o := range owners {
		known = known || o.typ == d.Type
	}
	if !known {
		return nil // the type's own error says what is wrong
	}
	for _, o := range owners {
		if o.set && o.typ != d.Type {
			return fmt.Errorf("notify %s: %s: is a setting of a%s %s destination, not of a %s", d.Type, o.key, map[bool]string{true: "n"}[o.typ == TypeEmail], o.typ, d.Type)
		}
	}
	return nil
}

// Wants reports whether the destination receives event.
func (d *Destination) Wants(event string) bool {
	return len(d.Events) == 0 || slices.Contains(d.Events, event)
}

// ID identifies the destination in job payloads, stable across config
// reloads and across instances with the same config: its type and a hash
// of where it delivers — the URL less its userinfo, query values and
// fragment, the names of its headers, the SMTP server, sender and
// recipients, the script and its arguments as written (WrittenArgs) —
// with its event filter and scope. Nothing secret goes in (the HMAC key, header values, the SMTP
// username and password, a URL's credentials), so rotating a secret keeps
// the ID, and the ID, which the admin API shows, cannot be used to guess
// a secret.
func (d *Destination) ID() string {
	var headers []string
	for k := range d.Headers {
		headers = append(headers, textproto.CanonicalMIMEHeaderKey(k))
	}
	slices.Sort(headers)
	b, _ := json.Marshal(struct {
		Scope   string   `json:"scope,omitempty"`
		Events  []string `json:"events,omitempty"`
		URL     string   `json:"url,omitempty"`
		Headers []string `json:"headers,omitempty"`
		SMTP    string   `json:"smtp,omitempty"`
		TLS     string   `json:"tls,omitempty"`
		From    string   `json:"from,omitempty"`
		To      []string `json:"to,omitempty"`
		Command string   `json:"command,omitempty"`
		Args    []string `json:"args,omitempty"`
	}{d.Scope, d.Events, endpoint(d.URL), headers, d.SMTP, d.TLS, d.From, d.To, d.Command, d.idArgs()})
	sum := sha256.Sum256(append([]byte("notify destination v2\n"), b...))
	return d.Type + "-" + hex.EncodeToString(sum[:8])
}

// idArgs are the script's arguments as the ID knows them: as written.
func (d *Destination) idArgs() []string {
	if d.WrittenArgs != nil {
		return d.WrittenArgs
	}
	return d.Args
}

// legacyID is the ID earlier releases wrote in job payloads: a hash
// of every setting but the HMAC key and the SMTP password (so of header
// values too), and of the arguments as written (they replaced none).
// It is only ever computed to recognise their queued jobs, never
// written or shown.
func (d *Destination) legacyID() string {
	c := *d
	c.Secret, c.Password = "", ""
	c.Args = c.idArgs()
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return d.Type + "-" + hex.EncodeToString(sum[:8])
}

// endpoint is a webhook URL as far as it says where requests go: no
// userinfo, only the names of its query parameters, no fragment.
func endpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || raw == "" {
		return ""
	}
	u.User, u.Fragment, u.RawFragment = nil, "", ""
	if u.RawQuery != "" {
		var names []string
		for k := range u.Query() {
			names = append(names, url.QueryEscape(k))
		}
		slices.Sort(names)
		u.RawQuery = strings.Join(names, "&")
	}
	return u.String()
}

// Describe names the destination for logs and job errors: its type and
// its host (or the script's path) only — never a full URL, which may carry
// credentials, and never a secret.
func (d *Destination) Describe() string {
	switch d.Type {
	case TypeWebhook:
		if u, err := url.Parse(d.URL); err == nil {
			return "webhook " + u.Hostname()
		}
		return "webhook"
	case TypeEmail:
		host, _, _ := net.SplitHostPort(d.SMTP)
		return "email " + host
	case TypeScript:
		return "script " + d.Command
	}
	return d.Type
}

// payload is a notify_deliver job's payload.
type payload struct {
	Destination string `json:"destination"` // Destination.ID
	Via         string `json:"via"`         // Destination.Describe, for operators
	Event       Event  `json:"event"`
}

// Delivery jobs' budget: attempts, and how long an event stays worth
// delivering. The attempts last the lifetime at the job runner's backoff
// (30 s doubling to an hour: seven waits make the first hour, 22 more
// the next 22, the runner's ±10 % either way), so a receiver down for
// most of a day still gets the event, and a delivery to one down all
// day fails at its deadline rather than hours before it; at 10 attempts
// the budget was spent three hours in.
const (
	MaxAttempts = 30
	Lifetime    = 24 * time.Hour
)

// Jobs builds the notify_deliver jobs of ev for the destinations that
// want it; nil when none does. The caller stores them in the transaction
// that records the event, then wakes the runner (jobs.Queue.Wake(Kind)).
func Jobs(dests []Destination, ev Event) []store.NewJob {
	var out []store.NewJob
	for i := range dests {
		d := &dests[i]
		if !d.Wants(ev.Event) {
			continue
		}
		b, err := json.Marshal(payload{Destination: d.ID(), Via: d.Describe(), Event: ev})
		if err != nil {
			continue // an Event always marshals
		}
		out = append(out, store.NewJob{Kind: Kind, Payload: b, Deadline: ev.Time.Add(Lifetime), MaxAttempts: MaxAttempts})
	}
	return out
}
