package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
// past what the test looks at.
func quirkyUpstream(t *testing.T, q quirks) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	fill := func(s string) string { return strings.ReplaceAll(s, "{up}", up.URL) }
	up = fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
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
