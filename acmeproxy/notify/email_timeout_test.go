package notify_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// A mail server that stops answering part way through a session is cut
// off at the attempt's timeout, and the attempt retried; its error says
// it timed out and at which step, not what closing the connection at
// the timeout left ("use of closed network connection").
func TestAnEmailToAServerThatStopsAnsweringTimesOutSayingWhere(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name      string
		tls       string
		answerTo  int // commands answered before the server falls silent; -1: not even the greeting
		wantError string
	}{
		{"retry/a server that never greets", "", -1, "email 127.0.0.1: greeting: timed out after 300ms"},
		{"retry/a server that never answers EHLO", notify.TLSNone, 0, "email 127.0.0.1: EHLO: timed out after 300ms"},
		{"retry/a server that never answers the mail's end", notify.TLSNone, 4, "email 127.0.0.1: DATA: timed out after 300ms"},
		{"retry/a server that never answers the TLS handshake", notify.TLSImplicit, -1, "email 127.0.0.1: TLS: timed out after 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := startStallingSMTP(t, tt.answerTo)
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: addr, TLS: tt.tls, From: "a@example.com", To: []string{"b@example.com"}}
			d := notify.NewDeliverer(notify.Options{Timeout: timeout})
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			job := &jobs.Job{ID: 1, Kind: notify.Kind, Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventAccountCreated))[0].Payload}
			out := d.Run(context.Background(), job)
			if out.Kind() != "retry" || !strings.Contains(out.String(), tt.wantError) {
				t.Errorf("outcome %s; want retry with %q", out, tt.wantError)
			}
		})
	}
}

// startStallingSMTP serves SMTP on loopback, without TLS, answering the
// greeting and the first n commands (DATA's go-ahead included) and then
// nothing; n < 0 answers nothing at all.
func startStallingSMTP(t *testing.T, n int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				if n >= 0 {
					_, _ = c.Write([]byte("220 stalling ESMTP\r\n"))
					r := bufio.NewReader(c)
					for i := 0; i < n; i++ {
						line, err := r.ReadString('\n')
						if err != nil {
							return
						}
						reply := "250 ok\r\n"
						if strings.HasPrefix(strings.ToUpper(line), "DATA") {
							reply = "354 go on\r\n"
						}
						_, _ = c.Write([]byte(reply))
					}
				}
				<-done
			})
		}
	})
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	return ln.Addr().String()
}
