package acmeproxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// hookReceiver is a webhook receiver that checks every body's signature.
type hookReceiver struct {
	t      *testing.T
	secret string
	url    string

	mu     sync.Mutex
	events []notify.Event
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	h := &hookReceiver{t: t, secret: secret}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if got := r.Header.Get(notify.SignatureHeader); got != notify.Sign(h.secret, body) {
			t.Errorf("delivery with a bad signature %q: %s", got, body)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev notify.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("delivery body %s: %v", body, err)
		}
		h.mu.Lock()
		h.events = append(h.events, ev)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/acme"
	return h
}

// await waits for a delivery of the named event matching ok.
func (h *hookReceiver) await(name string, ok func(notify.Event) bool) notify.Event {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		for _, ev := range h.events {
			if ev.Event == name && (ok == nil || ok(ev)) {
				h.mu.Unlock()
				return ev
			}
		}
		h.mu.Unlock()
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s delivery arrived", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *hookReceiver) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ev := range h.events {
		if ev.Event == name {
			n++
		}
	}
	return n
}

// notifyingEnv is a test environment whose profile notifies dests, and
// whose runner delivers (unless deliver is false: a process that dies
// before its runner gets to the delivery).
func notifyingEnv(t *testing.T, eo envOptions, deliver bool, dests ...notify.Destination) *testEnv {
	t.Helper()
	prev := eo.opts
	eo.opts = func(o *Options) {
		o.Notify = dests
		if prev != nil {
			prev(o)
		}
	}
	if deliver {
		d := notify.NewDeliverer(notify.Options{})
		if err := d.Register(dests...); err != nil {
			t.Fatal(err)
		}
		eo.handlers = append(eo.handlers, d)
	}
	return newTestEnvWith(t, eo)
}

func TestIssuanceRevocationAccountAndChallengeFailureAreNotifiedSigned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hook := newHookReceiver(t, "hook-secret")
	e := notifyingEnv(t, envOptions{}, true, notify.Destination{Type: notify.TypeWebhook, URL: hook.url, Secret: hook.secret})

	c := e.client(ctx)
	acct := hook.await(vocab.EventAccountCreated, nil)
	if acct.Profile != "test" || acct.Account == "" || acct.Account != filepath.Base(string(c.KID)) {
		t.Errorf("account_created %+v does not name the account %s", acct, c.KID)
	}

	got := e.issue(ctx, c, "notify.example.com")
	issued := hook.await(vocab.EventCertificateIssued, func(ev notify.Event) bool { return ev.Order == got.order })
	if issued.Serial != hex.EncodeToString(got.leaf.SerialNumber.Bytes()) || len(issued.Identifiers) != 1 ||
		issued.Identifiers[0].Value != "notify.example.com" || issued.ClientAddress == "" || issued.Account != acct.Account {
		t.Errorf("certificate_issued %+v does not describe the issuance", issued)
	}

	if err := c.RevokeCert(ctx, nil, got.der, acme.CRLReasonKeyCompromise); err != nil {
		t.Fatal(err)
	}
	revoked := hook.await(vocab.EventCertificateRevoked, nil)
	if revoked.Order != got.order || revoked.Serial != issued.Serial || revoked.Reason != "1" {
		t.Errorf("certificate_revoked %+v does not describe the revocation", revoked)
	}

	// A client whose http-01 answer is wrong.
	o, err := c.AuthorizeOrder(ctx, acme.DomainIDs("wrong.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	z, err := c.GetAuthorization(ctx, o.AuthzURLs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range z.Challenges {
		if ch.Type == vocab.ChallengeHTTP01 {
			e.http01.set(ch.Token, "not-the-key-authorization")
			if _, err := c.Accept(ctx, ch); err != nil {
				t.Fatal(err)
			}
		}
	}
	failed := hook.await(vocab.EventChallengeFailed, nil)
	if failed.Order != filepath.Base(o.URI) || failed.Identifiers[0].Value != "wrong.example.com" || failed.Reason == "" {
		t.Errorf("challenge_failed %+v does not describe the failure", failed)
	}

	if err := c.DeactivateReg(ctx); err != nil {
		t.Fatal(err)
	}
	hook.await(vocab.EventAccountDeactivated, func(ev notify.Event) bool { return ev.Account == acct.Account })
	for _, name := range []string{vocab.EventAccountCreated, vocab.EventCertificateIssued, vocab.EventCertificateRevoked} {
		if n := hook.count(name); n != 1 {
			t.Errorf("%d deliveries of %s, want 1", n, name)
		}
	}
}

func TestANotificationOutlivesAProcessThatDiesBeforeDeliveringIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hook := newHookReceiver(t, "s")
	dst := notify.Destination{Type: notify.TypeWebhook, URL: hook.url, Secret: "s", Events: []string{vocab.EventCertificateIssued}}
	dbPath := filepath.Join(t.TempDir(), "acme.db")

	// The first process records the issuance, and dies before its runner
	// runs the delivery: its runner has no notify_deliver handler, and
	// is stopped.
	first := notifyingEnv(t, envOptions{dbPath: dbPath}, false, dst)
	got := first.issue(ctx, first.client(ctx), "crash.example.com")
	if err := first.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	owed, err := first.db.ListJobs(ctx, store.JobFilter{Kind: notify.Kind, Status: store.JobReady})
	if err != nil || len(owed) != 1 {
		t.Fatalf("%d deliveries owed after the issuance (%v), want 1", len(owed), err)
	}
	if n := hook.count(vocab.EventCertificateIssued); n != 0 {
		t.Fatalf("%d deliveries before the restart", n)
	}

	// The next process on the same store delivers it.
	notifyingEnv(t, envOptions{dbPath: dbPath, ca: first.ca, runner: jobs.RunnerOptions{PollInterval: 10 * time.Millisecond}}, true, dst)
	ev := hook.await(vocab.EventCertificateIssued, nil)
	if ev.Order != got.order || ev.Serial != hex.EncodeToString(got.leaf.SerialNumber.Bytes()) {
		t.Errorf("delivered %+v, want the crashed process's issuance of order %s", ev, got.order)
	}
}

func TestEveryIssuanceAuditRowCommitsWithItsDeliveries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dst := notify.Destination{Type: notify.TypeWebhook, URL: "http://127.0.0.1:1/", Events: []string{vocab.EventCertificateIssued}}
	e := notifyingEnv(t, envOptions{}, false, dst)
	c := e.client(ctx)
	for _, n := range []string{"a.example.com", "b.example.com", "c.example.com"} {
		e.issue(ctx, c, n)
	}
	rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCertificateIssued})
	owed, err := e.db.ListJobs(ctx, store.JobFilter{Kind: notify.Kind})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(owed) != 3 {
		t.Fatalf("%d issuance rows and %d deliveries, want 3 and 3", len(rows), len(owed))
	}
}
