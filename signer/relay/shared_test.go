package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/go-jose/go-jose/v4"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

func TestAPublishedHTTPChallengeIsInTheStoreUntilItIsCleanedUp(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, "https://ca.example/dir", ChallengeHTTP01)
	chal := acme.Challenge{Type: "http-01", Token: "tok_db", KeyAuthorization: "tok_db.thumb",
		Identifier: acme.Identifier{Type: "dns", Value: "web.example.com"}}
	if err := b.s.http.Present(ctx, chal); err != nil {
		t.Fatal(err)
	}
	got, err := b.db.GetRelayHTTPToken(ctx, "tok_db", b.clock.Now())
	if err != nil {
		t.Fatalf("the store after Present: %v", err)
	}
	if got.Identifier != "web.example.com" || got.KeyAuth != "tok_db.thumb" {
		t.Errorf("stored %+v", got)
	}
	if want := b.clock.Now().Add(DefaultAttemptTimeout); !got.Expires.Equal(want.Truncate(time.Millisecond)) {
		t.Errorf("expires %v; want one attempt's bound, %v", got.Expires, want)
	}
	if err := b.s.http.CleanUp(ctx, chal); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.GetRelayHTTPToken(ctx, "tok_db", b.clock.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the store after CleanUp: %v; want ErrNotFound", err)
	}
}

// accountUpstream is an upstream that registers accounts, recording the
// key of each new-account request.
type accountUpstream struct {
	mu   sync.Mutex
	keys []string // JWK thumbprints, one per new-account request
	url  string
}

func newAccountUpstream(t *testing.T) *accountUpstream {
	u := &accountUpstream{}
	srv := fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/account" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		thumb := ""
		if jws, err := jose.ParseSigned(string(body), []jose.SignatureAlgorithm{jose.ES256}); err == nil && len(jws.Signatures) == 1 && jws.Signatures[0].Protected.JSONWebKey != nil {
			raw, _ := jws.Signatures[0].Protected.JSONWebKey.Thumbprint(0x5)
			thumb = fmt.Sprintf("%x", raw)
		}
		u.mu.Lock()
		u.keys = append(u.keys, thumb)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", u.url+"/acct/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":"valid"}`))
	})
	u.url = srv.URL
	return u
}

// anotherInstance is a second signer for the bench's profile, on the
// bench's store but with a Caddy storage of its own, as a second Caddy
// instance on one database has.
func (b *bench) anotherInstance(t *testing.T, directory string) *Signer {
	t.Helper()
	s, err := New(Options{Directory: directory, Challenge: ChallengeBypass, Clock: b.clock,
		Storage: &certmagic.FileStorage{Path: filepath.Join(t.TempDir(), "storage")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(signer.Binding{Profile: "p", Settler: b.settler, Queue: jobs.NewQueue(b.db, b.clock), DB: b.db, Logger: zap.NewNop()}); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInstancesWithTheirOwnCaddyStorageShareOneUpstreamAccountThroughTheStore(t *testing.T) {
	ctx := context.Background()
	up := newAccountUpstream(t)
	b := newBench(t, up.url+"/dir", ChallengeBypass)
	other := b.anotherInstance(t, up.url+"/dir")

	first, err := b.s.account(ctx, b.s.client(&recorder{base: b.s.transport, now: b.clock.Now}), "p")
	if err != nil {
		t.Fatal(err)
	}
	second, err := other.account(ctx, other.client(&recorder{base: other.transport, now: b.clock.Now}), "p")
	if err != nil {
		t.Fatal(err)
	}
	if first.Location != up.url+"/acct/1" || second.Location != first.Location {
		t.Errorf("accounts at %q and %q; want both at the one registered", first.Location, second.Location)
	}
	k1, _ := json.Marshal(first.PrivateKey.Public())
	k2, _ := json.Marshal(second.PrivateKey.Public())
	if string(k1) != string(k2) {
		t.Error("the second instance uses another account key than the first")
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.keys) != 1 {
		t.Errorf("the upstream saw %d registrations; want 1 (the second instance reads the account from the store)", len(up.keys))
	}
}

func TestAnUpstreamAccountAnEarlierVersionKeptInCaddyStorageIsMovedIntoTheStore(t *testing.T) {
	ctx := context.Background()
	up := newAccountUpstream(t)
	b := newBench(t, up.url+"/dir", ChallengeBypass)
	// What an earlier version wrote: a registered account in storage.
	legacy := accountRecord{KeyPEM: testKeyPEM(t), Location: up.url + "/acct/legacy", Contact: []string{"mailto:ops@example.com"}}
	raw, _ := json.Marshal(legacy)
	if err := b.s.opts.Storage.Store(ctx, b.s.accountKey("p"), raw); err != nil {
		t.Fatal(err)
	}

	acct, err := b.s.account(ctx, b.s.client(&recorder{base: b.s.transport, now: b.clock.Now}), "p")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Location != legacy.Location {
		t.Errorf("account at %q; want the one in storage, %q", acct.Location, legacy.Location)
	}
	stored, err := b.db.GetRelayAccount(ctx, b.s.issuerKey, "p")
	if err != nil || stored.KeyPEM != legacy.KeyPEM || stored.Location != legacy.Location {
		t.Errorf("the store holds %+v (%v); want the account from storage", stored, err)
	}
	if b.s.opts.Storage.Exists(ctx, b.s.accountKey("p")) {
		t.Errorf("Caddy storage still holds the account key at %s; a move leaves one copy, the store's", b.s.accountKey("p"))
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.keys) != 0 {
		t.Errorf("the upstream saw %d registrations; want none", len(up.keys))
	}
}

func TestAForgottenUpstreamAccountIsRegisteredAgainWithItsKey(t *testing.T) {
	ctx := context.Background()
	up := newAccountUpstream(t)
	b := newBench(t, up.url+"/dir", ChallengeBypass)
	c := b.s.client(&recorder{base: b.s.transport, now: b.clock.Now})
	if _, err := b.s.account(ctx, c, "p"); err != nil {
		t.Fatal(err)
	}
	b.s.forgetAccount(ctx, "p")
	if got, err := b.db.GetRelayAccount(ctx, b.s.issuerKey, "p"); err != nil || got.Location != "" {
		t.Fatalf("after forgetting: %+v %v; want the key kept, unregistered", got, err)
	}
	if _, err := b.s.account(ctx, c, "p"); err != nil {
		t.Fatal(err)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.keys) != 2 || up.keys[0] != up.keys[1] || up.keys[0] == "" {
		t.Errorf("registrations with keys %q; want two with one key", strings.Join(up.keys, ", "))
	}
}

// testKeyPEM is a fresh P-256 key, PKCS#8 PEM, as the account record
// holds it.
func testKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func TestTheChallengeHandlerAnswersOnlyATokenPublishedForTheHostAsked(t *testing.T) {
	ctx := context.Background()
	b := newBench(t, "https://ca.example/dir", ChallengeHTTP01)
	now := b.clock.Now()
	for _, tok := range []store.RelayHTTPToken{
		{Token: "tokA", Identifier: "web.example.com", KeyAuth: "tokA.thumb", Expires: now.Add(time.Hour)},
		{Token: "tokIP", Identifier: "2001:db8::1", KeyAuth: "tokIP.thumb", Expires: now.Add(time.Hour)},
		{Token: "tokOld", Identifier: "web.example.com", KeyAuth: "tokOld.thumb", Expires: now.Add(-time.Second)},
	} {
		if err := b.db.PutRelayHTTPToken(ctx, tok, now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, method, host, path string
		answered                 bool
		body                     string
	}{
		{"ok/the token for its host", http.MethodGet, "web.example.com", "/.well-known/acme-challenge/tokA", true, "tokA.thumb"},
		{"ok/the host in another case, with a port", http.MethodGet, "WEB.example.com:80", "/.well-known/acme-challenge/tokA", true, "tokA.thumb"},
		{"ok/an IPv6 literal host", http.MethodGet, "[2001:db8::1]:80", "/.well-known/acme-challenge/tokIP", true, "tokIP.thumb"},
		{"ok/HEAD answers without a body", http.MethodHead, "web.example.com", "/.well-known/acme-challenge/tokA", true, ""},
		{"pass/another host", http.MethodGet, "other.example.com", "/.well-known/acme-challenge/tokA", false, ""},
		{"pass/an unknown token", http.MethodGet, "web.example.com", "/.well-known/acme-challenge/nope", false, ""},
		{"pass/an expired token", http.MethodGet, "web.example.com", "/.well-known/acme-challenge/tokOld", false, ""},
		{"pass/another path", http.MethodGet, "web.example.com", "/tokA", false, ""},
		{"pass/a deeper path", http.MethodGet, "web.example.com", "/.well-known/acme-challenge/tokA/x", false, ""},
		{"pass/POST", http.MethodPost, "web.example.com", "/.well-known/acme-challenge/tokA", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "http://"+tt.host+tt.path, nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			answered, err := ServeHTTPChallenge(rec, req, b.db, now)
			if err != nil {
				t.Fatal(err)
			}
			if answered != tt.answered {
				t.Fatalf("answered = %v; want %v", answered, tt.answered)
			}
			if !answered {
				if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
					t.Errorf("wrote %q with headers %v while passing the request on", rec.Body, rec.Header())
				}
				return
			}
			if rec.Code != http.StatusOK || rec.Body.String() != tt.body || rec.Header().Get("Content-Type") != "text/plain" {
				t.Errorf("answer %d %q (%s); want 200 %q", rec.Code, rec.Body, rec.Header().Get("Content-Type"), tt.body)
			}
		})
	}
}
