package notify_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	netmail "net/mail"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// receiver answers webhook deliveries with the scripted statuses (then
// 200), recording each request.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	headers  map[int]http.Header // status → extra headers
	got      []delivery
}

type delivery struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	r := &receiver{statuses: statuses, headers: map[int]http.Header{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: body})
		status := http.StatusOK
		if len(r.statuses) > 0 {
			status, r.statuses = r.statuses[0], r.statuses[1:]
		}
		for k, v := range r.headers[status] {
			w.Header()[k] = v
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func TestAWebhookGetsTheEventSignedWithItsHeaders(t *testing.T) {
	rcv := newReceiver(t)
	dst := notify.Destination{Type: notify.TypeWebhook, URL: rcv.URL + "/hook", Secret: "s3cret",
		Headers: map[string]string{"Authorization": "Bearer tok"}}
	r := newRig(t, notify.Options{}, dst)
	ev := sampleEvent(acme.EventCertificateIssued)
	ids := r.event(t, ev, dst)
	if len(ids) != 1 {
		t.Fatalf("%d delivery jobs, want 1", len(ids))
	}
	if j := r.wait(t, ids[0]); j.Status != store.JobDone || j.Attempts != 1 {
		t.Fatalf("job %s after %d attempts (%s)", j.Status, j.Attempts, j.LastError)
	}
	got := rcv.deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries", len(got))
	}
	d := got[0]
	if sig := d.header.Get(notify.SignatureHeader); sig != notify.Sign("s3cret", d.body) || len(sig) != 64 {
		t.Errorf("signature %q does not sign the body", sig)
	}
	for k, want := range map[string]string{"Authorization": "Bearer tok", "Content-Type": "application/json",
		notify.EventHeader: acme.EventCertificateIssued, notify.DeliveryHeader: "1"} {
		if v := d.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	var back notify.Event
	if err := json.Unmarshal(d.body, &back); err != nil {
		t.Fatal(err)
	}
	if back.Event != ev.Event || back.Profile != "internal" || back.Serial != "0a1b" || back.ClientAddress != "192.0.2.7" ||
		len(back.Identifiers) != 2 || !back.Time.Equal(ev.Time) || back.Order != "ord1" || back.Account != "acct1" {
		t.Errorf("body %s does not carry the event", d.body)
	}
}

func TestAWebhookEventFilterAndUnsignedDelivery(t *testing.T) {
	rcv := newReceiver(t)
	only := notify.Destination{Type: notify.TypeWebhook, URL: rcv.URL, Events: []string{acme.EventCertificateRevoked}}
	r := newRig(t, notify.Options{}, only)
	if ids := r.event(t, sampleEvent(acme.EventCertificateIssued), only); len(ids) != 0 {
		t.Fatalf("an unwanted event made %d jobs", len(ids))
	}
	ids := r.event(t, sampleEvent(acme.EventCertificateRevoked), only)
	r.wait(t, ids[0])
	if got := rcv.deliveries(); len(got) != 1 || got[0].header.Get(notify.SignatureHeader) != "" {
		t.Fatalf("deliveries %v: want one, unsigned", got)
	}
}

func TestWebhookFailuresAreRetriedOrAbandonedByStatus(t *testing.T) {
	tests := []struct {
		name         string
		statuses     []int
		retryAfter   string
		wantStatus   store.JobStatus
		wantAttempts int
		wantRequests int
	}{
		{"ok/500 twice then 200: three attempts, one success", []int{500, 500, 200}, "", store.JobDone, 3, 3},
		{"ok/408 and 502 are retried", []int{408, 502}, "", store.JobDone, 3, 3},
		{"ok/429 with Retry-After waits as asked, then delivers on the next attempt", []int{429}, "0", store.JobDone, 2, 2},
		// A receiver asking for no pause at all, for ever, is asked
		// MaxAttempts times, not every poll until the deadline.
		{"fail/503 with Retry-After 0 each time is abandoned once the attempts are spent",
			slices.Repeat([]int{503}, notify.MaxAttempts+5), "0", store.JobFailed, notify.MaxAttempts, notify.MaxAttempts},
		{"fail/400 is abandoned after one attempt", []int{400}, "", store.JobFailed, 1, 1},
		{"fail/a redirect is not followed", []int{302}, "", store.JobFailed, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, tc.statuses...)
			if tc.retryAfter != "" {
				rcv.headers[429] = http.Header{"Retry-After": {tc.retryAfter}}
				rcv.headers[503] = http.Header{"Retry-After": {tc.retryAfter}}
			}
			// Credentials in the URL must never reach a log or the job row.
			url := strings.Replace(rcv.URL, "http://", "http://user:hunter2@", 1) + "/hook?token=topsecret"
			dst := notify.Destination{Type: notify.TypeWebhook, URL: url, Secret: "hmackey"}
			r := newRig(t, notify.Options{}, dst)
			ids := r.event(t, sampleEvent(acme.EventChallengeFailed), dst)
			j := r.wait(t, ids[0])
			if j.Status != tc.wantStatus || j.Attempts != tc.wantAttempts {
				t.Errorf("job %s after %d attempts (%s); want %s after %d", j.Status, j.Attempts, j.LastError, tc.wantStatus, tc.wantAttempts)
			}
			if n := len(rcv.deliveries()); n != tc.wantRequests {
				t.Errorf("%d requests, want %d", n, tc.wantRequests)
			}
			abandoned := r.logs.FilterField(zapString("event", "notification_abandoned")).All()
			if want := map[bool]int{true: 1, false: 0}[tc.wantStatus == store.JobFailed]; len(abandoned) != want {
				t.Errorf("%d abandonment log lines, want %d", len(abandoned), want)
			}
			for _, e := range r.logs.All() {
				line, _ := json.Marshal(e.ContextMap())
				checkNoSecret(t, "log line "+e.Message+" "+string(line))
			}
			checkNoSecret(t, "job row "+j.LastError+" "+string(j.Payload))
			if tc.wantStatus == store.JobFailed && !strings.Contains(j.LastError, "webhook 127.0.0.1") {
				t.Errorf("the reason %q does not name the destination's host", j.LastError)
			}
		})
	}
}

// Every answer that is retried is retried no sooner than its
// Retry-After asks, as the README says of 408, 429 and 5xx alike: a
// gateway's 502 or 504 asking for two minutes is not asked again at the
// runner's first, shorter backoff.
func TestEveryRetriedAnswerWaitsForItsRetryAfter(t *testing.T) {
	for _, code := range []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "120")
				w.WriteHeader(code)
			}))
			t.Cleanup(srv.Close)
			dst := notify.Destination{Type: notify.TypeWebhook, URL: srv.URL}
			d := notify.NewDeliverer(notify.Options{})
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			job := &jobs.Job{ID: 1, Kind: notify.Kind, Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventCertificateIssued))[0].Payload}
			if got, want := d.Run(context.Background(), job).String(), "retry after 2m0s: "; !strings.HasPrefix(got, want) {
				t.Errorf("outcome %q; want it to start %q", got, want)
			}
		})
	}
}

// Each attempt that fails and is retried logs its debug line, whether
// the receiver asked for a pause (Retry-After) or not.
func TestEveryRetriedAttemptLogsThatItFailed(t *testing.T) {
	rcv := newReceiver(t, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests)
	rcv.headers[http.StatusServiceUnavailable] = http.Header{"Retry-After": {"0"}}
	rcv.headers[http.StatusTooManyRequests] = http.Header{"Retry-After": {"0"}}
	dst := notify.Destination{Type: notify.TypeWebhook, URL: rcv.URL}
	r := newRig(t, notify.Options{}, dst)
	ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
	if j := r.wait(t, ids[0]); j.Status != store.JobDone || j.Attempts != 4 {
		t.Fatalf("job %s after %d attempts (%s); want done after 4", j.Status, j.Attempts, j.LastError)
	}
	var got []string
	for _, e := range r.logs.FilterField(zapString("event", "notification_attempt_failed")).All() {
		got = append(got, e.ContextMap()["error"].(string))
	}
	want := []string{"webhook 127.0.0.1: HTTP 500", "webhook 127.0.0.1: HTTP 503, retry after 0s", "webhook 127.0.0.1: HTTP 429, retry after 0s"}
	if !slices.Equal(got, want) {
		t.Errorf("attempt failures logged %q; want %q", got, want)
	}
}

func checkNoSecret(t *testing.T, s string) {
	t.Helper()
	for _, secret := range []string{"hunter2", "topsecret", "hmackey", "/hook"} {
		if strings.Contains(s, secret) {
			t.Errorf("%q leaks in %s", secret, s)
		}
	}
}

func TestADeliveryToAnUnknownDestinationWaitsForAConfigThatHasIt(t *testing.T) {
	known := notify.Destination{Type: notify.TypeWebhook, URL: "http://127.0.0.1:1/"}
	d := notify.NewDeliverer(notify.Options{})
	job := &jobs.Job{ID: 1, Kind: notify.Kind, Payload: notify.Jobs([]notify.Destination{known}, sampleEvent(acme.EventAccountCreated))[0].Payload}
	if out := d.Run(context.Background(), job); out.Kind() != "retry_after" {
		t.Fatalf("outcome %s, want retry_after", out)
	}
}

func TestAnEmailArrivesOverStartTLSAndOverImplicitTLS(t *testing.T) {
	for _, implicit := range []bool{false, true} {
		name := map[bool]string{false: "starttls", true: "implicit"}[implicit]
		t.Run(name, func(t *testing.T) {
			srv := startSMTP(t, implicit)
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com",
				To: []string{"ops@example.com", "pki@example.com"}, Username: "acme", Password: "pw"}
			if implicit {
				dst.TLS = notify.TLSImplicit
			}
			r := newRig(t, notify.Options{TLS: &tls.Config{RootCAs: srv.certs}}, dst)
			ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
			if j := r.wait(t, ids[0]); j.Status != store.JobDone {
				t.Fatalf("job %s: %s", j.Status, j.LastError)
			}
			m := srv.received()
			if len(m) != 1 {
				t.Fatalf("%d mails", len(m))
			}
			if !m[0].tls || m[0].auth == "" || m[0].from != "acme@example.com" || strings.Join(m[0].to, ",") != "ops@example.com,pki@example.com" {
				t.Errorf("mail %+v: want TLS, AUTH and the envelope", m[0])
			}
			for _, want := range []string{"Subject: [acme_proxy] certificate_issued (internal): a.example.com and 1 more",
				"From: acme@example.com", "Content-Type: text/plain", "serial:         0a1b", "identifier:     dns b.example.com"} {
				if !strings.Contains(m[0].data, want) {
					t.Errorf("the mail lacks %q:\n%s", want, m[0].data)
				}
			}
		})
	}
}

func TestAnEmailRefusedByTheServerIsAbandoned(t *testing.T) {
	srv := startSMTP(t, false)
	srv.rcptReply = map[string]string{"nobody@example.com": "550 no such user"}
	dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com", To: []string{"nobody@example.com"}}
	r := newRig(t, notify.Options{TLS: &tls.Config{RootCAs: srv.certs}}, dst)
	ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
	if j := r.wait(t, ids[0]); j.Status != store.JobFailed || j.Attempts != 1 || !strings.Contains(j.LastError, "550") {
		t.Fatalf("job %s after %d attempts (%s); want failed after 1 with the 550", j.Status, j.Attempts, j.LastError)
	}
}

func TestAScriptGetsTheEventOnStdinInACleanEnvironment(t *testing.T) {
	t.Setenv("ACME_PROXY_TEST_SECRET", "leaked")
	dir := t.TempDir()
	out := filepath.Join(dir, "event.json")
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat > \"$1\"\nenv > \"$2\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := notify.Destination{Type: notify.TypeScript, Command: script, Args: []string{out, filepath.Join(dir, "env")}}
	r := newRig(t, notify.Options{}, dst)
	ev := sampleEvent(acme.EventCertificateRevoked)
	ev.Reason = "1"
	ids := r.event(t, ev, dst)
	if j := r.wait(t, ids[0]); j.Status != store.JobDone {
		t.Fatalf("job %s: %s", j.Status, j.LastError)
	}
	body, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var back notify.Event
	if err := json.Unmarshal(body, &back); err != nil || back.Event != acme.EventCertificateRevoked || back.Reason != "1" || back.Serial != "0a1b" {
		t.Errorf("stdin was %s (%v)", body, err)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	if strings.Contains(string(env), "ACME_PROXY_TEST_SECRET") || strings.Contains(string(env), "HOME=") {
		t.Errorf("the script inherited the environment:\n%s", env)
	}
}

// A notify script runs in the root directory, as the script signer does,
// whatever directory Caddy was started in: a script reading or writing a
// relative path does the same under systemd and from a shell.
func TestAScriptRunsInTheRootDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	out := filepath.Join(dir, "cwd")
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat > /dev/null\npwd > \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := notify.Destination{Type: notify.TypeScript, Command: script, Args: []string{out}}
	r := newRig(t, notify.Options{}, dst)
	ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
	if j := r.wait(t, ids[0]); j.Status != store.JobDone {
		t.Fatalf("job %s: %s", j.Status, j.LastError)
	}
	if cwd, err := os.ReadFile(out); err != nil || strings.TrimSpace(string(cwd)) != "/" {
		t.Errorf("the script ran in %q (%v), want /", cwd, err)
	}
}

func TestScriptFailures(t *testing.T) {
	dir := t.TempDir()
	failing := filepath.Join(dir, "fail.sh")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	removed := filepath.Join(dir, "removed.sh")
	if err := os.WriteFile(removed, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		command      string
		removeAfter  bool // removed once registered, as a config loaded
		wantAttempts int
		wantReason   string
	}{
		{"fail/a script removed after the config loaded is abandoned at once", removed, true, 1, "no such file"},
		{"fail/a script that fails is retried until the budget is spent", failing, false, notify.MaxAttempts, "exited with status 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := notify.Destination{Type: notify.TypeScript, Command: tc.command}
			r := newRig(t, notify.Options{}, dst)
			if tc.removeAfter {
				if err := os.Remove(tc.command); err != nil {
					t.Fatal(err)
				}
			}
			ids := r.event(t, sampleEvent(acme.EventAccountCreated), dst)
			j := r.wait(t, ids[0])
			if j.Status != store.JobFailed || j.Attempts != tc.wantAttempts || !strings.Contains(j.LastError, tc.wantReason) {
				t.Errorf("job %s after %d attempts (%s); want failed after %d with %q", j.Status, j.Attempts, j.LastError, tc.wantAttempts, tc.wantReason)
			}
		})
	}
}

func TestAScriptThatHangsIsCutOffAtItsTimeout(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hang.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := notify.NewDeliverer(notify.Options{Timeout: 50 * time.Millisecond})
	dst := notify.Destination{Type: notify.TypeScript, Command: script}
	if err := d.Register(dst); err != nil {
		t.Fatal(err)
	}
	job := &jobs.Job{ID: 1, Kind: notify.Kind, Payload: notify.Jobs([]notify.Destination{dst}, sampleEvent(acme.EventAccountCreated))[0].Payload}
	start := time.Now()
	out := d.Run(context.Background(), job)
	if out.Kind() != "retry" || !strings.Contains(out.String(), "timed out") || time.Since(start) > 5*time.Second {
		t.Fatalf("outcome %s after %s; want a retry for the timeout, quickly", out, time.Since(start))
	}
}

func TestDestinationsAreValidatedAndIdentifiedWithoutTheirSecrets(t *testing.T) {
	a := notify.Destination{Type: notify.TypeWebhook, URL: "https://h.example.com/x", Secret: "one"}
	b := a
	b.Secret = "two"
	if a.ID() != b.ID() || strings.Contains(a.ID(), "one") {
		t.Errorf("IDs %q %q: want equal, without the secret", a.ID(), b.ID())
	}
	if got := (&notify.Destination{Type: notify.TypeWebhook, URL: "https://u:p@h.example.com/x?k=v"}).Describe(); got != "webhook h.example.com" {
		t.Errorf("Describe = %q", got)
	}
	for _, bad := range []notify.Destination{
		{Type: "pager"},
		{Type: notify.TypeWebhook, URL: "ftp://h.example.com"},
		{Type: notify.TypeWebhook, URL: "https://h.example.com", Events: []string{"everything"}},
		{Type: notify.TypeEmail, SMTP: "m.example.com", From: "a@example.com", To: []string{"b@example.com"}},
		{Type: notify.TypeEmail, SMTP: "m.example.com:25", From: "a@example.com"},
		{Type: notify.TypeEmail, SMTP: "m.example.com:25", From: "a@example.com", To: []string{"b@example.com"}, Username: "u"},
		{Type: notify.TypeScript},
		{Type: notify.TypeScript, Command: "bin/notify"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestAScriptThatCannotRunFailsAtLoadNamingTheKey(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notify.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, command, want string
	}{
		{"a relative path", "bin/notify", `notify script: command: "bin/notify" must be an absolute path`},
		{"a name looked up in PATH", "logger", `notify script: command: "logger" must be an absolute path`},
		{"a missing file", filepath.Join(dir, "missing.sh"), "notify script: command: stat " + filepath.Join(dir, "missing.sh") + ": no such file or directory"},
		{"a file that is not executable", notExec, "notify script: command: " + notExec + " is not an executable file"},
		{"a directory", dir, "notify script: command: " + dir + " is not an executable file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := notify.NewDeliverer(notify.Options{}).Register(notify.Destination{Type: notify.TypeScript, Command: tt.command})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Register: %v; want %q", err, tt.want)
			}
		})
	}
}

func TestAnEmailUsernameWithoutItsPasswordIsRefusedNamingTheEmptyOne(t *testing.T) {
	d := notify.Destination{Type: notify.TypeEmail, SMTP: "m.example.com:25", From: "a@example.com", To: []string{"b@example.com"},
		Username: "mailer-login"}
	err := d.Validate()
	if err == nil || !strings.Contains(err.Error(), "notify email: password: empty") || !strings.Contains(err.Error(), "{env.") {
		t.Fatalf("Validate: %v; want it to name the empty password and the unset placeholder it may come from", err)
	}
	if strings.Contains(err.Error(), d.Username) {
		t.Errorf("the error quotes the username: %v", err)
	}
}

// An smtp address whose port no connection could use fails at load,
// naming the key: else every delivery would fail before it left, and be
// retried for a day. A port by number or by a service's name is taken.
func TestAnEmailSMTPAddressIsRefusedWithoutAUsablePort(t *testing.T) {
	tests := []struct {
		name  string
		smtp  string
		valid bool
	}{
		{"ok/submission's port", "m.example.com:587", true},
		{"ok/a service name", "m.example.com:smtp", true},
		{"fail/a port above 65535", "m.example.com:99999", false},
		{"fail/port 0", "m.example.com:0", false},
		{"fail/a negative port", "m.example.com:-25", false},
		{"fail/an empty port", "m.example.com:", false},
		{"fail/a port that names no service", "m.example.com:nosuchservice", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := notify.Destination{Type: notify.TypeEmail, SMTP: tt.smtp, From: "a@example.com", To: []string{"b@example.com"}}
			err := d.Validate()
			if tt.valid {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if want := fmt.Sprintf("notify email: smtp: %q must be host:port", tt.smtp); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate: %v; want %q", err, want)
			}
		})
	}
}

// An smtp written as a URL or with a user ("smtp://acme:{env.SMTP_PASSWORD}@m.example.com:587",
// as other tools take it) fails the load, naming the key, and the error
// does not quote it: it holds the password, and the load's error is
// logged. "user@host:port" is no host either (its lookup would fail
// every delivery, for a day).
func TestAnEmailSMTPWrittenAsAURLWithCredentialsIsRefusedWithoutQuotingThem(t *testing.T) {
	const password = "pw-CANARY-2718"
	tests := []struct {
		name string
		smtp string
	}{
		{"fail/a URL with a username and password", "smtp://acme:" + password + "@m.example.com:587"},
		{"fail/user:password@host:port", "acme:" + password + "@m.example.com:587"},
		{"fail/user@host:port", "acme@m.example.com:587"},
		{"fail/a URL without credentials", "smtps://m.example.com:465"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := notify.Destination{Type: notify.TypeEmail, SMTP: tt.smtp, From: "a@example.com", To: []string{"b@example.com"}}
			err := d.Validate()
			if want := "notify email: smtp: must be host:port"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate: %v; want %q", err, want)
			}
			if err != nil && strings.Contains(err.Error(), password) {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// A setting of another type of destination would be ignored: it is most
// likely a mistake about which destination is being written.
func TestASettingOfAnotherTypeOfDestinationFailsNamingIt(t *testing.T) {
	tests := []struct {
		name string
		d    notify.Destination
		want string
	}{
		{"a webhook with an smtp server", notify.Destination{Type: notify.TypeWebhook, URL: "https://h.example.com", SMTP: "m.example.com:25"},
			"notify webhook: smtp: is a setting of an email destination, not of a webhook"},
		{"an email with a command", notify.Destination{Type: notify.TypeEmail, SMTP: "m.example.com:25", From: "a@example.com",
			To: []string{"b@example.com"}, Command: "/bin/true"}, "notify email: command: is a setting of a script destination"},
		{"a script with a webhook secret", notify.Destination{Type: notify.TypeScript, Command: "/bin/true", Secret: "s"},
			"notify script: secret: is a setting of a webhook destination"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.d.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate: %v; want %q", err, tt.want)
			}
		})
	}
}

// An e-mail keeps to RFC 5322's 998-octet lines and to 7-bit text, which
// a server without 8BITMIME must be sent, whatever an event's detail
// holds: a detail as long as an audit row keeps (1 KiB, a signer
// backend's error, say) or one in UTF-8 reaches its reader whole once
// the body is decoded.
func TestAnEmailKeepsItsLinesShortAndSevenBitWithALongOrUTF8Detail(t *testing.T) {
	tests := []struct {
		name   string
		detail string
	}{
		{name: "ok/a detail of an audit row's full length", detail: strings.Repeat("upstream said no; ", store.AuditDetailMax/18)},
		{name: "ok/a detail in UTF-8", detail: "le programme a refusé la requête — « clé inconnue »"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, false)
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com", To: []string{"ops@example.com"}}
			r := newRig(t, notify.Options{TLS: &tls.Config{RootCAs: srv.certs}}, dst)
			ev := sampleEvent(acme.EventCertificateIssueFailed)
			ev.Detail = tt.detail
			ids := r.event(t, ev, dst)
			if j := r.wait(t, ids[0]); j.Status != store.JobDone {
				t.Fatalf("job %s: %s", j.Status, j.LastError)
			}
			m := srv.received()
			if len(m) != 1 {
				t.Fatalf("%d mails", len(m))
			}
			for i, line := range strings.Split(m[0].data, "\n") {
				if n := len(strings.TrimSuffix(line, "\r")); n > 998 {
					t.Errorf("line %d is %d octets long, over RFC 5322's 998", i+1, n)
				}
				for _, b := range []byte(line) {
					if b >= 0x80 {
						t.Errorf("line %d carries 8-bit octets: %q", i+1, line)
						break
					}
				}
			}
			msg, err := netmail.ReadMessage(strings.NewReader(m[0].data))
			if err != nil {
				t.Fatalf("the mail does not parse: %v", err)
			}
			body := io.Reader(msg.Body)
			if strings.EqualFold(msg.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
				body = quotedprintable.NewReader(body)
			}
			text, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			if want := "detail:         " + tt.detail; !strings.Contains(string(text), want) {
				t.Errorf("the decoded body lacks the whole detail %q:\n%s", want, text)
			}
		})
	}
}

// net/smtp sends credentials without TLS only to localhost; anywhere
// else every attempt would fail ("unencrypted connection") and be
// retried for a day before the mail is abandoned. The config says so
// when it loads instead.
func TestAnEmailWithCredentialsWithoutTLSLoadsOnlyForLocalhost(t *testing.T) {
	tests := []struct {
		name    string
		smtp    string
		tls     string
		wantErr string
	}{
		{"fail/tls none to a remote server", "mail.example.com:25", notify.TLSNone,
			`notify email: username: credentials are sent only over TLS; with tls none only to localhost, 127.0.0.1 or ::1, not "mail.example.com"`},
		{"fail/tls none to another loopback address", "127.0.0.2:25", notify.TLSNone, `not "127.0.0.2"`},
		{"ok/tls none to localhost", "localhost:25", notify.TLSNone, ""},
		{"ok/tls none to 127.0.0.1", "127.0.0.1:25", notify.TLSNone, ""},
		{"ok/tls none to ::1", "[::1]:25", notify.TLSNone, ""},
		{"ok/starttls to a remote server", "mail.example.com:587", "", ""},
		{"ok/implicit tls to a remote server", "mail.example.com:465", notify.TLSImplicit, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := notify.Destination{Type: notify.TypeEmail, SMTP: tt.smtp, TLS: tt.tls, From: "a@example.com",
				To: []string{"b@example.com"}, Username: "mailer", Password: "pw"}
			err := d.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate: %v; want it to load", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate: %v; want %q", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// A header Go's HTTP client would refuse to send fails the load, naming
// the header but never quoting its value (a token): else every delivery
// would fail before it left, and be retried for a day.
func TestAWebhookHeaderThatCannotBeSentFailsAtLoadNamingIt(t *testing.T) {
	tests := []struct {
		name, header, value, want string
	}{
		{"fail/a name with a parenthesis", "X-Token(1)", "v", `notify webhook: header: "X-Token(1)" is not a header name`},
		{"fail/a name in UTF-8", "X-Clé", "v", `notify webhook: header: "X-Clé" is not a header name`},
		{"fail/a value with a line break", "Authorization", "Bearer abc\ndef", "notify webhook: header Authorization: the value holds a control character"},
		{"fail/a value with a NUL", "Authorization", "Bearer abc\x00def", "notify webhook: header Authorization: the value holds a control character"},
		{"ok/a bearer token", "Authorization", "Bearer abc.def-ghi", ""},
		{"ok/a value with a tab and UTF-8", "X-Note", "équipe\tpki", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := notify.Destination{Type: notify.TypeWebhook, URL: "https://h.example.com/x", Headers: map[string]string{tt.header: tt.value}}
			err := d.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v; want it to load", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate: %v; want %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "abc") {
				t.Errorf("the error quotes the value: %v", err)
			}
		})
	}
}

// A header that would not reach the receiver as configured fails the
// load, naming it: one the request sets itself (Go's client writes Host
// from the URL and drops the others' map entries; the deliverer
// overwrites Content-Type, User-Agent and its own), and one name given
// twice in another case, of which a delivery sends either value.
func TestAWebhookHeaderThatWouldNotBeSentAsConfiguredFailsAtLoadNamingIt(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"fail/Host, which the URL sets", map[string]string{"Host": "hooks.internal"},
			"notify webhook: header Host: is set by each request itself"},
		{"fail/User-Agent in lower case", map[string]string{"user-agent": "mine"},
			"notify webhook: header user-agent: is set by each request itself"},
		{"fail/Content-Type", map[string]string{"Content-Type": "text/plain"},
			"notify webhook: header Content-Type: is set by each request itself"},
		{"fail/Content-Length", map[string]string{"Content-Length": "1"},
			"notify webhook: header Content-Length: is set by each request itself"},
		{"fail/the signature header", map[string]string{notify.SignatureHeader: "00"},
			"notify webhook: header " + notify.SignatureHeader + ": is set by each request itself"},
		{"fail/the delivery header", map[string]string{notify.DeliveryHeader: "1"},
			"notify webhook: header " + notify.DeliveryHeader + ": is set by each request itself"},
		{"fail/one name in two cases", map[string]string{"Authorization": "Bearer abc", "authorization": "Bearer abd"},
			"notify webhook: header authorization: given twice, as Authorization too"},
		{"ok/Accept-Encoding, which the request leaves to the config", map[string]string{"Accept-Encoding": "identity"}, ""},
		{"ok/two distinct names", map[string]string{"Authorization": "Bearer abc", "X-Tenant": "pki"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := notify.Destination{Type: notify.TypeWebhook, URL: "https://h.example.com/x", Headers: tt.headers}
			err := d.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v; want it to load", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate: %v; want %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "abc") {
				t.Errorf("the error quotes a value: %v", err)
			}
		})
	}
}

// A receiver drops a redelivery (its first answer was lost, say) and a
// replayed request by the delivery id, which the signature covers: it
// is in the signed body, the same on every attempt, as in the
// X-Acme-Proxy-Delivery header. A header alone could be changed by
// whoever replays a captured request, the signature still verifying.
func TestARedeliveryCarriesTheSameDeliveryIDInsideTheSignedBody(t *testing.T) {
	rcv := newReceiver(t, http.StatusInternalServerError, http.StatusOK)
	dst := notify.Destination{Type: notify.TypeWebhook, URL: rcv.URL, Secret: "s3cret"}
	r := newRig(t, notify.Options{}, dst)
	ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
	if j := r.wait(t, ids[0]); j.Status != store.JobDone || j.Attempts != 2 {
		t.Fatalf("job %s after %d attempts (%s); want done after 2", j.Status, j.Attempts, j.LastError)
	}
	got := rcv.deliveries()
	if len(got) != 2 {
		t.Fatalf("%d deliveries, want 2", len(got))
	}
	for i, d := range got {
		var body struct {
			Delivery int64  `json:"delivery"`
			Event    string `json:"event"`
		}
		if err := json.Unmarshal(d.body, &body); err != nil {
			t.Fatal(err)
		}
		if body.Delivery != ids[0] || body.Event != acme.EventCertificateIssued {
			t.Errorf("attempt %d: body %s; want delivery %d inside it", i+1, d.body, ids[0])
		}
		if h := d.header.Get(notify.DeliveryHeader); h != strconv.FormatInt(ids[0], 10) {
			t.Errorf("attempt %d: %s %q; want %d", i+1, notify.DeliveryHeader, h, ids[0])
		}
		if d.header.Get(notify.SignatureHeader) != notify.Sign("s3cret", d.body) {
			t.Errorf("attempt %d: the signature does not sign the body", i+1)
		}
	}
	if string(got[0].body) != string(got[1].body) {
		t.Errorf("the redelivery's body differs:\n%s\n%s", got[0].body, got[1].body)
	}
}

// The credentials and the mail go only over a TLS connection to the
// server the destination names: a server that does not offer STARTTLS
// (or someone between that strips it) is abandoned at once, one whose
// certificate is not trusted is retried; neither is sent AUTH or the
// mail.
func TestAnEmailWithoutTheTLSItRequiresSendsNeitherCredentialsNorTheMail(t *testing.T) {
	tests := []struct {
		name         string
		noStartTLS   bool
		trusted      bool
		wantAttempts int
		wantReason   string
	}{
		{"fail/a server that does not offer STARTTLS is abandoned at once", true, true, 1, "does not offer STARTTLS"},
		{"fail/a server whose certificate is not trusted is retried", false, false, notify.MaxAttempts, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startSMTP(t, false)
			srv.noStartTLS = tt.noStartTLS
			dst := notify.Destination{Type: notify.TypeEmail, SMTP: srv.addr, From: "acme@example.com",
				To: []string{"ops@example.com"}, Username: "acme", Password: "pw"}
			opts := notify.Options{TLS: &tls.Config{}}
			if tt.trusted {
				opts.TLS.RootCAs = srv.certs
			} else {
				opts.TLS.RootCAs = x509.NewCertPool()
			}
			r := newRig(t, opts, dst)
			ids := r.event(t, sampleEvent(acme.EventCertificateIssued), dst)
			j := r.wait(t, ids[0])
			if j.Status != store.JobFailed || j.Attempts != tt.wantAttempts || !strings.Contains(j.LastError, tt.wantReason) {
				t.Errorf("job %s after %d attempts (%s); want failed after %d with %q", j.Status, j.Attempts, j.LastError, tt.wantAttempts, tt.wantReason)
			}
			if n, m := srv.authCount(), len(srv.received()); n != 0 || m != 0 {
				t.Errorf("the server got %d AUTH commands and %d mails; want none", n, m)
			}
		})
	}
}
