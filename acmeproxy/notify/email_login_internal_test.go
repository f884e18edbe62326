package notify

import (
	"net/smtp"
	"strings"
	"testing"
)

// LOGIN sends the password as PLAIN does: only over TLS, or in the
// clear to a server on loopback, and only to the server the
// credentials are for; each prompt is answered by what it asks for.
func TestLOGINSendsThePasswordOnlyOverTLSOrToLoopback(t *testing.T) {
	tests := []struct {
		name    string
		server  smtp.ServerInfo
		host    string
		wantErr string // "": LOGIN starts
	}{
		{name: "ok/over TLS to the host", server: smtp.ServerInfo{Name: "smtp.example.com", TLS: true}, host: "smtp.example.com"},
		{name: "ok/in the clear to 127.0.0.1", server: smtp.ServerInfo{Name: "127.0.0.1"}, host: "127.0.0.1"},
		{name: "ok/in the clear to localhost", server: smtp.ServerInfo{Name: "localhost"}, host: "localhost"},
		{name: "ok/in the clear to ::1", server: smtp.ServerInfo{Name: "::1"}, host: "::1"},
		{name: "fail/in the clear to a host not loopback", server: smtp.ServerInfo{Name: "smtp.example.com"}, host: "smtp.example.com",
			wantErr: "unencrypted connection"},
		{name: "fail/to another host than the credentials'", server: smtp.ServerInfo{Name: "other.example.com", TLS: true}, host: "smtp.example.com",
			wantErr: "wrong host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &loginAuth{username: "acme", password: "pw", host: tt.host}
			mech, resp, err := a.Start(&tt.server)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || resp != nil {
					t.Errorf("Start: %q, %q, %v; want the error %q", mech, resp, err, tt.wantErr)
				}
				return
			}
			if err != nil || mech != "LOGIN" || resp != nil {
				t.Errorf("Start: %q, %q, %v; want LOGIN without an initial response", mech, resp, err)
			}
		})
	}
}

func TestLOGINAnswersEachPromptByWhatItAsksFor(t *testing.T) {
	tests := []struct {
		name    string
		prompt  string
		more    bool
		want    string
		wantErr string
	}{
		{name: "ok/Username:", prompt: "Username:", more: true, want: "acme"},
		{name: "ok/User Name, as some servers word it", prompt: "User Name", more: true, want: "acme"},
		{name: "ok/Password:", prompt: "Password:", more: true, want: "pw"},
		{name: "ok/password: in lower case", prompt: "password:", more: true, want: "pw"},
		{name: "ok/the server's last reply", prompt: "2.7.0 Authentication successful", more: false, want: ""},
		{name: "fail/a prompt for something else", prompt: "Domain:", more: true,
			wantErr: `the server's LOGIN prompt "Domain:" asks for neither the username nor the password`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &loginAuth{username: "acme", password: "pw", host: "smtp.example.com"}
			got, err := a.Next([]byte(tt.prompt), tt.more)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != nil {
					t.Errorf("Next: %q, %v; want the error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("Next: %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
