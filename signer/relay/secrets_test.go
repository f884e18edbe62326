package relay

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// secretDirectory is base's /dir as an upstream behind an
// authenticating gateway is configured: a user and a password, a token
// and a key in the query. The password and the token hold characters
// that end a URL in prose (parentheses) and percent-encoded ones
// ("%40" is '@', "%2B" is '+'), as generated secrets do.
func secretDirectory(base string) string {
	return strings.Replace(base, "://", "://relayuser:s3cr%40t(pw)X@", 1) + "/dir?token=tok(en)Secret123&key=k%2Bey456"
}

// secretMAC is the EAB HMAC key the relay is configured with, base64url.
var secretMAC = base64.RawURLEncoding.EncodeToString([]byte("\xfb\xff-the upstream's HMAC key for EAB-\xfe"))

// secretParts are pieces of the secrets of secretDirectory and
// secretMAC, each of which is in every form the secret takes in a text
// (as configured, percent-decoded, percent-encoded again): none may be
// seen anywhere.
var secretParts = []string{"relayuser", "s3cr", "(pw)X", "Secret123", "ey456", secretMAC,
	base64.StdEncoding.EncodeToString([]byte("\xfb\xff-the upstream's HMAC key for EAB-\xfe")),
	// The Basic credentials Go's HTTP client sends for the URL's
	// userinfo, as an Authorization header quotes them.
	base64.StdEncoding.EncodeToString([]byte("relayuser:s3cr@t(pw)X"))}

// gatewayUpstream is an upstream behind a gateway that answers every
// request, the directory's too, with answer; base is its own URL.
func gatewayUpstream(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, base string)) string {
	t.Helper()
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Replay-Nonce", fmt.Sprintf("nonce-%d", time.Now().UnixNano()))
		answer(w, r, ts.URL)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// A relay's directory URL may carry its upstream's credentials, and its
// EAB key is one: whatever the upstream does — nothing at all, a
// gateway's error page quoting the request, an answer that is no ACME,
// a refusal that repeats the token it was sent or the key it issued —
// no log line, no job error, no order's failure detail, no error of a
// revocation or of renewal information carries any of them, in any
// encoding; each still names the upstream it is about.
func TestNoSecretOfTheUpstreamDirectoryOrEABKeyIsLoggedOrStoredWhateverTheUpstreamAnswers(t *testing.T) {
	tests := []struct {
		name     string
		upstream func(t *testing.T) string // the directory's scheme, host and port
	}{
		{"fail/unreachable", func(t *testing.T) string { return "http://" + closedPort(t) }},
		{"fail/a gateway's 502 page quoting the request", func(t *testing.T) string {
			return gatewayUpstream(t, func(w http.ResponseWriter, r *http.Request, _ string) {
				http.Error(w, "<html>502 Bad Gateway: no backend for "+r.URL.RequestURI()+"</html>", http.StatusBadGateway)
			})
		}},
		{"fail/a gateway's 401 page quoting the request's Authorization header", func(t *testing.T) string {
			return gatewayUpstream(t, func(w http.ResponseWriter, r *http.Request, _ string) {
				http.Error(w, "<html>401 Unauthorized: "+r.Header.Get("Authorization")+" is not accepted here</html>", http.StatusUnauthorized)
			})
		}},
		{"fail/a directory that is no ACME, quoting the request", func(t *testing.T) string {
			return gatewayUpstream(t, func(w http.ResponseWriter, r *http.Request, _ string) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprintf(w, `{"newNonce": [%q`, r.URL.RequestURI())
			})
		}},
		// The upstream's own URLs carry the token its gateway wants, and
		// its refusal repeats the token, decoded, and the key it issued.
		{"fail/a refusal repeating the token and the key", func(t *testing.T) string {
			return gatewayUpstream(t, func(w http.ResponseWriter, r *http.Request, base string) {
				switch r.URL.Path {
				case "/dir":
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(map[string]string{
						"newNonce": base + "/nonce?" + r.URL.RawQuery, "newAccount": base + "/account?" + r.URL.RawQuery,
						"newOrder": base + "/order?" + r.URL.RawQuery, "revokeCert": base + "/revoke?" + r.URL.RawQuery,
					})
				case "/nonce":
					w.WriteHeader(http.StatusOK)
				default:
					detail := fmt.Sprintf("token %s and EAB key %s (%s) are not accepted at %s", r.URL.Query().Get("token"), secretMAC,
						base64.StdEncoding.EncodeToString([]byte("\xfb\xff-the upstream's HMAC key for EAB-\xfe")), r.URL.RequestURI())
					problemAnswer(http.StatusForbidden, acme.ProblemTypeUnauthorized, detail)(w, r)
				}
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			upstream := tt.upstream(t)
			core, logs := observer.New(zap.DebugLevel)
			db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			b := benchLogging(t, db, clocktest.New(time.Now()), &fakeSettler{issued: map[string][][]byte{}, failed: map[string][]string{}},
				zap.New(core), secretDirectory(upstream), ChallengeBypass, func(o *Options) {
					o.EAB = &acme.EAB{KeyID: "kid-1", MACKey: secretMAC}
					o.FinalizeWait = -1
				})
			req := b.finalized(t, "a.example.com")
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			seen := map[string]string{}
			j := b.job(t, req.OrderID)
			out := b.s.RunJob(ctx, j)
			seen["the job's outcome"] = out.String()
			if err := b.s.AbandonJob(ctx, j, out.String()); err != nil {
				t.Fatal(err)
			}
			seen["the order's failure detail"] = strings.Join(b.settler.failed[req.OrderID], "\n")
			ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
			if err != nil {
				t.Fatal(err)
			}
			seen["the relay mapping's detail"] = ro.Detail
			if _, err := b.s.Issue(ctx, req); err != nil {
				seen["a finalize of the failed order"] = err.Error()
			}
			if err := b.s.Revoke(ctx, &x509.Certificate{SerialNumber: big.NewInt(7)}, nil); err != nil {
				seen["a revocation's error"] = err.Error()
			}
			leaf := &x509.Certificate{SerialNumber: big.NewInt(12345), AuthorityKeyId: []byte{1, 2, 3}}
			if _, err := b.s.RenewalInfo(ctx, leaf, nil); err != nil {
				seen["renewal information's error"] = err.Error()
			}
			for i, e := range logs.All() {
				seen[fmt.Sprintf("log line %d", i)] = fmt.Sprintf("%s %v", e.Message, e.ContextMap())
			}

			for what, text := range seen {
				for _, part := range secretParts {
					if strings.Contains(text, part) {
						t.Errorf("%s holds a secret (%q):\n%s", what, part, text)
					}
				}
			}
			for what, text := range seen {
				t.Logf("%s: %s", what, text)
			}
			shown := upstream + "/dir?token&key"
			for _, what := range []string{"the job's outcome", "the order's failure detail"} {
				if !strings.Contains(seen[what], shown) {
					t.Errorf("%s does not name the upstream as %s:\n%s", what, shown, seen[what])
				}
			}
			if len(seen) < 7 {
				t.Errorf("only %d texts were seen; want the outcome, two details, a finalize's, a revocation's and renewal information's errors and log lines", len(seen))
			}
		})
	}
}

// A directory URL refused at load is named without its secrets: a
// config error is printed and logged by Caddy.
func TestADirectoryURLRefusedAtLoadIsNotQuotedWithItsSecrets(t *testing.T) {
	tests := []struct {
		name, directory, want string
	}{
		{"fail/not http", "ftp://relayuser:s3cr%40t(pw)X@ca.example/dir?token=tok(en)Secret123&key=k%2Bey456",
			`"ftp://ca.example/dir?token&key" must be an absolute https:// (or http://) URL`},
		{"fail/does not parse", "https://relayuser:s3cr%zzt(pw)X@ca.example/dir?token=tok(en)Secret123",
			"the URL does not parse; it must be an absolute https:// (or http://) URL"},
		{"fail/no host", "https:///dir?token=tok(en)Secret123", `"https:///dir?token" must be an absolute https:// (or http://) URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{Directory: tt.directory, Challenge: ChallengeBypass, Storage: &certmagic.FileStorage{Path: t.TempDir()}})
			if oe, ok := errors.AsType[*OptionError](err); !ok || oe.Option != "directory" {
				t.Fatalf("New: %v; want an OptionError for directory", err)
			}
			for _, part := range secretParts {
				if strings.Contains(err.Error(), part) {
					t.Errorf("error %q holds a secret (%q)", err, part)
				}
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q; want it to say %q", err, tt.want)
			}
		})
	}
}
