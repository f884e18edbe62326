package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// quirks are what a quirkyUpstream answers.
type quirks struct {
	account, location, order, authz string
}

// quirkyUpstream is an upstream whose account, order and authorization
// are what the test makes of them: account (its Location), location
// and order (the order's Location and JSON), and authz (the one
// authorization's JSON, /authz/1). Each string may name the upstream's
// own URL as {up}. Its certificate, /cert/1, links an issuer at a URL
// longer than maxUpstreamURL. Anything else is refused: the relay got
// past what the test looks at. Each of seen is shown every request.
func quirkyUpstream(t *testing.T, q quirks, seen ...func(*http.Request)) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	fill := func(s string) string { return strings.ReplaceAll(s, "{up}", up.URL) }
	up = fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		for _, f := range seen {
			f(r)
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/account":
			w.Header().Set("Location", fill(q.account))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"valid"}`))
		case "/order", "/order/1":
			w.Header().Set("Location", fill(q.location))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(fill(q.order)))
		case "/cert/1":
			w.Header().Set("Content-Type", "application/pem-certificate-chain")
			w.Header().Set("Link", "<"+strings.Repeat("b", maxUpstreamURL)+`>;rel="up"`)
			_, _ = w.Write([]byte("not checked before its issuers are read\n"))
		case "/authz/1":
			_, _ = w.Write([]byte(fill(q.authz)))
		default:
			refuse(w, r)
		}
	})
	return up
}

// The URLs the upstream answers — its account's and its order's
// Location, which the relay stores, its authorizations', challenges' and
// certificate's, which it logs and asks — and its challenges' tokens,
// which it stores and serves, are bounded before anything is stored or
// asked: an upstream answering one longer (or a token outside
// base64url) fails the attempt as an answer that is not ACME's, which is
// retried, the reason saying which and how long, without quoting it
// whole.
func TestAnUpstreamsURLsAndTokensLongerThanAnyCAsAreRefusedBeforeTheyAreStored(t *testing.T) {
	long := "{up}/" + strings.Repeat("a", maxUpstreamURL)
	const (
		pending = `{"status":"pending","identifiers":[{"type":"dns","value":"url.example.com"}],"finalize":"{up}/finalize/1","authorizations":["%s"]}`
		authz   = `{"status":"pending","identifier":{"type":"dns","value":"url.example.com"},"challenges":[{"type":"http-01","url":"%s","token":"%s","status":"pending"}]}`
		token   = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"
	)
	ok := quirks{account: "{up}/acct/1", location: "{up}/order/1", order: fmt.Sprintf(pending, "{up}/authz/1"),
		authz: fmt.Sprintf(authz, "{up}/chal/1", token)}
	tests := []struct {
		name      string
		challenge string
		q         func(q *quirks)
		want      string // in the retry's reason; "" for none
	}{
		{"ok/URLs and a token as a CA's get the challenge triggered", ChallengeHTTP01, func(q *quirks) {}, ""},
		{"fail/an account URL too long", ChallengeBypass, func(q *quirks) { q.account = long }, "account URL"},
		{"fail/an order URL too long", ChallengeBypass, func(q *quirks) { q.location = long }, "order URL"},
		{"fail/an authorization URL too long", ChallengeBypass, func(q *quirks) { q.order = fmt.Sprintf(pending, long) }, "authorization URL"},
		{"fail/a finalize URL too long", ChallengeBypass, func(q *quirks) {
			q.order = strings.Replace(q.order, `"pending"`, `"ready"`, 1)
			q.order = strings.Replace(q.order, "{up}/finalize/1", long, 1)
		}, "finalize URL"},
		{"fail/a certificate URL too long", ChallengeBypass, func(q *quirks) {
			q.order = `{"status":"valid","identifiers":[{"type":"dns","value":"url.example.com"}],"finalize":"{up}/finalize/1","certificate":"` + long + `"}`
		}, "certificate URL"},
		{"fail/a challenge URL too long", ChallengeBypass, func(q *quirks) { q.authz = fmt.Sprintf(authz, long, token) }, "challenge URL"},
		{"fail/a token too long", ChallengeHTTP01, func(q *quirks) {
			q.authz = fmt.Sprintf(authz, "{up}/chal/1", strings.Repeat("A", maxChallengeToken+1))
		}, "challenge token"},
		{"fail/a token outside base64url", ChallengeHTTP01, func(q *quirks) { q.authz = fmt.Sprintf(authz, "{up}/chal/1", "../../etc/passwd") }, "challenge token"},
		{"fail/an empty token", ChallengeHTTP01, func(q *quirks) { q.authz = fmt.Sprintf(authz, "{up}/chal/1", "") }, "challenge token"},
		{"fail/a Link to an issuer too long", ChallengeBypass, func(q *quirks) {
			q.order = `{"status":"valid","identifiers":[{"type":"dns","value":"url.example.com"}],"finalize":"{up}/finalize/1","certificate":"{up}/cert/1"}`
		}, "issuer URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := ok
			tt.q(&q)
			up := quirkyUpstream(t, q)
			b := newBench(t, up.URL+"/dir", tt.challenge)
			ctx := context.Background()
			req := b.finalized(t, "url.example.com")
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
			switch {
			case tt.want == "" && !strings.Contains(out, "triggering the http-01 challenge") && !strings.Contains(out, "refused by the test"):
				t.Errorf("outcome %.300q; want the challenge triggered (and refused by the test)", out)
			case tt.want != "" && (!strings.HasPrefix(out, "retry: ") || !strings.Contains(out, tt.want) || !strings.Contains(out, "longer than") && !strings.Contains(out, "base64url")):
				t.Errorf("outcome %.300q; want a retry naming the %s too long or not base64url", out, tt.want)
			}
			if strings.Contains(out, strings.Repeat("a", 200)) {
				t.Errorf("outcome %.300q quotes the URL whole", out)
			}
			if acct, err := b.db.GetRelayAccount(ctx, b.s.issuerKey, "p"); err == nil && len(acct.Location) > maxUpstreamURL {
				t.Errorf("the relay account's location of %d bytes is stored", len(acct.Location))
			}
			if ro, err := b.db.GetRelayOrder(ctx, req.OrderID); err == nil && len(ro.UpstreamOrderURL) > maxUpstreamURL {
				t.Errorf("the upstream order URL of %d bytes is stored", len(ro.UpstreamOrderURL))
			} else if err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
		})
	}
}

// The relay's transport reads no more than 64 KiB of an upstream
// answer's header: Go's default, 10 MB, would have each answer's header
// held in memory whole, and its Location and Link values with it.
func TestAnUpstreamAnswersHeaderLargerThanAnyACMEAnswersIsNotRead(t *testing.T) {
	tests := []struct {
		name   string
		filler int
		ok     bool
	}{
		{"ok/a header of some kilobytes", 8 << 10, true},
		{"fail/a header of a megabyte", 1 << 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Filler", strings.Repeat("f", tt.filler))
				_ = json.NewEncoder(w).Encode(map[string]string{})
			}))
			t.Cleanup(up.Close)
			resp, err := (&http.Client{Transport: newTransport(nil)}).Get(up.URL)
			if err == nil {
				resp.Body.Close()
			}
			if tt.ok != (err == nil) {
				t.Errorf("reading an answer with a header of %d bytes: %v; want ok %v", tt.filler, err, tt.ok)
			}
		})
	}
}

// An upstream order lists an authorization per identifier at most (RFC
// 8555 §7.1.3), and the relay reads each one it lists: an order listing
// more than its identifiers, or more than an order may have, fails the
// attempt as an answer that is not ACME's, which is retried, before any
// authorization is asked for.
func TestAnUpstreamOrderListingMoreAuthorizationsThanIdentifiersIsRefusedBeforeAnyIsRead(t *testing.T) {
	order := func(names, authzs int) string {
		ids := make([]string, names)
		for i := range ids {
			ids[i] = fmt.Sprintf(`{"type":"dns","value":"n%d.example.com"}`, i)
		}
		urls := make([]string, authzs)
		for i := range urls {
			urls[i] = `"{up}/authz/1"`
		}
		return `{"status":"pending","identifiers":[` + strings.Join(ids, ",") + `],"finalize":"{up}/finalize/1","authorizations":[` +
			strings.Join(urls, ",") + `]}`
	}
	const authz = `{"status":"pending","identifier":{"type":"dns","value":"n0.example.com"},"challenges":[{"type":"http-01","url":"{up}/chal/1","token":"LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0","status":"pending"}]}`
	tests := []struct {
		name   string
		order  string
		refuse bool
	}{
		{"ok/an authorization per identifier is read", order(2, 2), false},
		{"fail/more authorizations than identifiers", order(1, 50), true},
		{"fail/more authorizations than an order may have identifiers", order(maxOrderIdentifiers+1, maxOrderIdentifiers+1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var read atomic.Int32
			q := quirks{account: "{up}/acct/1", location: "{up}/order/1", order: tt.order, authz: authz}
			up := quirkyUpstream(t, q, func(r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/authz/") {
					read.Add(1)
				}
			})
			b := newBench(t, up.URL+"/dir", ChallengeBypass)
			ctx := context.Background()
			req := b.finalized(t, "n0.example.com")
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
			switch {
			case tt.refuse && (!strings.HasPrefix(out, "retry: ") || !strings.Contains(out, "authorizations")):
				t.Errorf("outcome %.300q; want a retry saying the order lists too many authorizations", out)
			case tt.refuse && read.Load() != 0:
				t.Errorf("the relay read %d authorizations of the order; want none", read.Load())
			case !tt.refuse && read.Load() == 0:
				t.Errorf("outcome %.300q; want the authorizations read", out)
			}
		})
	}
}

// The terms of service an upstream links when it wants them agreed to
// (userActionRequired) are quoted in the relay's reason, the operator's
// to read: a URL longer than any CA's is quoted only in part, as its
// other URLs are.
func TestAnUpstreamsTermsOfServiceURLLongerThanAnyCAsIsQuotedOnlyInPart(t *testing.T) {
	tests := []struct {
		name  string
		terms string
		whole bool
	}{
		{"ok/a CA's terms are quoted whole", "https://ca.example/terms/2027-01-01.pdf", true},
		{"fail/terms longer than any CA's are cut", "https://ca.example/terms/" + strings.Repeat("t", 60<<10), false},
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := fakeUpstream(t, problemAnswer(403, "urn:ietf:params:acme:error:userActionRequired", "Terms of service have changed",
				"Link", "<"+tt.terms+`>;rel="terms-of-service"`))
			s := &Signer{opts: Options{Directory: up.URL + "/dir"}}
			rec := &recorder{base: http.DefaultTransport, now: time.Now}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := s.client(rec).NewAccount(ctx, acme.Account{PrivateKey: key, TermsOfServiceAgreed: true})
			if err == nil {
				t.Fatal("the upstream call succeeded")
			}
			f := noSecrets.classify(err, rec.lastResponse())
			if strings.Contains(f.reason, tt.terms) != tt.whole {
				t.Errorf("reason (%d bytes) %.300q; want the terms quoted whole: %v", len(f.reason), f.reason, tt.whole)
			}
			if !strings.Contains(f.reason, "the upstream's terms of service: https://ca.example/terms/") || len(f.reason) > 1024 {
				t.Errorf("reason (%d bytes) %.300q; want the start of the terms' URL quoted, within 1 KiB", len(f.reason), f.reason)
			}
		})
	}
}
