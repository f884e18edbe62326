package notify

import (
	"errors"
	"fmt"
	"net/smtp"
	"slices"
	"strings"

	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// authenticate sends the destination's username and password by the
// mechanism the server asks for in its EHLO answer (after STARTTLS):
// PLAIN when it offers it, else LOGIN, which Microsoft 365, Exchange
// and some relays offer alone. A server offering neither, or no AUTH,
// is sent nothing: it would answer 5xx, or take the mail without them,
// but have them; that is a setting of the server's or of this
// destination, which no retry changes, so the error is permanent.
// Either mechanism sends the password only over TLS or to a loopback
// server (see loginAuth.Start; smtp.PlainAuth does the same).
func authenticate(c *smtp.Client, dst Destination, host string) error {
	offered, mechs := c.Extension("AUTH")
	if !offered {
		return permanent(errors.New("AUTH: the server does not offer authentication (no AUTH in its EHLO answer); the username and password were not sent (remove them if the server takes mail without)"))
	}
	has := func(mech string) bool {
		return slices.ContainsFunc(strings.Fields(mechs), func(m string) bool { return strings.EqualFold(m, mech) })
	}
	switch {
	case has("PLAIN"):
		return c.Auth(smtp.PlainAuth("", dst.Username, dst.Password, host))
	case has("LOGIN"):
		return c.Auth(&loginAuth{username: dst.Username, password: dst.Password, host: host})
	}
	return permanent(fmt.Errorf("AUTH: the server offers %s, neither PLAIN nor LOGIN, the mechanisms sent; the username and password were not sent",
		textcut.Clip(oneLine(mechs), maxReply, "…")))
}

// loginAuth is the LOGIN mechanism, which no RFC specifies (it is
// draft-murchison-sasl-login): "AUTH LOGIN", then the server prompts
// with base64 "Username:" and "Password:" (334 replies, which net/smtp
// decodes) and each is answered with the value, base64-encoded by
// net/smtp. No initial response is sent: the username waits for its
// prompt, which every server sends.
type loginAuth struct {
	username, password, host string
}

// Start refuses, as smtp.PlainAuth does, a connection that is not TLS
// to a server that is not loopback, and a server other than the one
// the credentials are for.
func (a *loginAuth) Start(server *smtp.ServerInfo) (string, []byte, error) {
	if !server.TLS && !isLoopbackName(server.Name) {
		return "", nil, errors.New("unencrypted connection")
	}
	if server.Name != a.host {
		return "", nil, errors.New("wrong host name")
	}
	return "LOGIN", nil, nil
}

// Next answers a prompt by what it asks for. Servers word it
// differently ("Username:", "User Name", "Password:"); a prompt that
// asks for neither is not answered (net/smtp then cancels with "*").
func (a *loginAuth) Next(fromServer []byte, more bool) ([]byte, error) {
	if !more {
		return nil, nil
	}
	prompt := strings.ToLower(strings.TrimSpace(string(fromServer)))
	switch {
	case strings.HasPrefix(prompt, "user"):
		return []byte(a.username), nil
	case strings.HasPrefix(prompt, "pass"):
		return []byte(a.password), nil
	}
	return nil, fmt.Errorf("the server's LOGIN prompt %q asks for neither the username nor the password", textcut.Clip(string(fromServer), 64, "…"))
}

// isLoopbackName is net/smtp's own rule for sending PLAIN in the clear.
func isLoopbackName(name string) bool {
	return name == "localhost" || name == "127.0.0.1" || name == "::1"
}
