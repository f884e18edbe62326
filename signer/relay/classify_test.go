package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// noSecrets is a relay configured with no secret: classify's reason is
// cut by withoutURLSecrets alone.
var noSecrets secrets

// fakeUpstream is an ACME server whose directory and nonces work and whose
// every other request gets answer.
func fakeUpstream(t *testing.T, answer http.HandlerFunc) *httptest.Server {
	t.Helper()
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Replay-Nonce", fmt.Sprintf("nonce-%d", time.Now().UnixNano()))
		switch r.URL.Path {
		case "/dir":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{
				"newNonce": ts.URL + "/nonce", "newAccount": ts.URL + "/account",
				"newOrder": ts.URL + "/order", "revokeCert": ts.URL + "/revoke", "keyChange": ts.URL + "/key",
			})
		case "/nonce":
			w.WriteHeader(http.StatusOK)
		default:
			answer(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

// registeredUpstream is fakeUpstream whose newAccount registers every key as
// account /acct/1, valid; answer gets every other request.
func registeredUpstream(t *testing.T, answer http.HandlerFunc) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	up = fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/account" {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", up.URL+"/acct/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":"valid"}`))
	})
	return up
}

// problemAnswer answers with a problem document.
func problemAnswer(status int, typ, detail string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "detail": detail, "status": status})
	}
}

// disagreeingProblem answers HTTP status with a problem document whose
// status member says bodyStatus.
func disagreeingProblem(status, bodyStatus int, typ, detail string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "detail": detail, "status": bodyStatus})
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUpstreamFailuresAreClassifiedByWhoseAnswerTheyAre(t *testing.T) {
	const ns = "urn:ietf:params:acme:error:"
	tests := []struct {
		name   string
		answer http.HandlerFunc // nil: nothing listens
		hang   bool             // the upstream never answers
		want   verdict
		after  time.Duration
		// outcome is the start of the job outcome's String.
		outcome       string
		forgetAccount bool
		// refusal is what the client is told, zero for the generic problem.
		refusal signer.Kind
		// reasonHas, if set, is in the reason the operator sees.
		reasonHas string
		// spends says a wait the upstream asked for spends the attempt
		// (jobs.RetryNoSooner) rather than not (jobs.RetryAfter).
		spends bool
	}{
		{name: "connection refused", want: retry, outcome: "retry: "},
		{name: "timeout", hang: true, want: retry, outcome: "retry: timed out"},
		{name: "HTML 502 from a gateway", answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>"))
		}, want: retry, outcome: "retry: "},
		{name: "200 with a body that is not JSON", answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("<html>maintenance</html>"))
		}, want: retry, outcome: "retry: "},
		{name: "500 serverInternal", answer: problemAnswer(500, ns+"serverInternal", "boom"), want: retry, outcome: "retry: "},
		// An upstream failing with a Retry-After is waited for as it
		// asks, or the backoff when that is longer, spending the
		// attempt: one answering 503 with "Retry-After: 1" for hours is
		// not asked every second until the order expires.
		{name: "503 with Retry-After", answer: problemAnswer(503, ns+"serverInternal", "maintenance", "Retry-After", "7"),
			want: retry, after: 7 * time.Second, outcome: "retry after 7s: ", spends: true},
		{name: "429 with Retry-After", answer: problemAnswer(429, ns+"rateLimited", "too many new orders", "Retry-After", "120"),
			want: coolDown, after: 2 * time.Minute, outcome: "retry after 2m0s: "},
		{name: "429 without Retry-After", answer: problemAnswer(429, ns+"rateLimited", "slow down"),
			want: coolDown, after: defaultCoolDown, outcome: "retry after 1m0s: "},
		{name: "403 unauthorized", answer: problemAnswer(403, ns+"unauthorized", "account is not allowed"), want: giveUp, outcome: "failed: "},
		{name: "400 badCSR", answer: problemAnswer(400, ns+"badCSR", "key too small"), want: giveUp, outcome: "failed: ", refusal: signer.KindBadCSR},
		{name: "400 badPublicKey", answer: problemAnswer(400, ns+"badPublicKey", "key too small"), want: giveUp, outcome: "failed: ", refusal: signer.KindBadCSR},
		{name: "400 rejectedIdentifier", answer: problemAnswer(400, ns+"rejectedIdentifier", "forbidden by policy"), want: giveUp, outcome: "failed: ", refusal: signer.KindRejectedIdentifier},
		{name: "400 unsupportedIdentifier", answer: problemAnswer(400, ns+"unsupportedIdentifier", "no email identifiers"), want: giveUp, outcome: "failed: ", refusal: signer.KindRejectedIdentifier},
		{name: "403 caa", answer: problemAnswer(403, ns+"caa", "CAA forbids issuance"), want: giveUp, outcome: "failed: ", refusal: signer.KindCAA},
		{name: "400 malformed JWS", answer: problemAnswer(400, ns+"malformed", "JWS verification error"), want: giveUp, outcome: "failed: "},
		{name: "400 badSignatureAlgorithm", answer: problemAnswer(400, ns+"badSignatureAlgorithm", "ES512 is not supported"), want: giveUp, outcome: "failed: "},
		// The HTTP status decides; the document's status member is
		// advisory (RFC 7807 §3.1).
		{name: "503 whose problem document says 400", answer: disagreeingProblem(503, 400, ns+"malformed", "overloaded"),
			want: retry, outcome: "retry: ", reasonHas: "answered with HTTP status 503"},
		{name: "400 whose problem document says 500", answer: disagreeingProblem(400, 500, ns+"malformed", "JWS verification error"),
			want: giveUp, outcome: "failed: "},
		{name: "403 whose problem document says 429", answer: disagreeingProblem(403, 429, ns+"unauthorized", "account is not allowed"),
			want: giveUp, outcome: "failed: "},
		{name: "accountDoesNotExist", answer: problemAnswer(400, ns+"accountDoesNotExist", "no such account"),
			want: retry, outcome: "retry: ", forgetAccount: true},
		// RFC 8555 §7.3.3: new terms, to be agreed to by a human; the
		// operator is told where they are.
		{name: "403 userActionRequired with the new terms linked", answer: problemAnswer(403, ns+"userActionRequired", "Terms of service have changed",
			"Link", `<https://ca.example/terms/2027-01-01.pdf>;rel="terms-of-service"`),
			want: giveUp, outcome: "failed: ", reasonHas: "userActionRequired - Terms of service have changed (the upstream's terms of service: https://ca.example/terms/2027-01-01.pdf)"},
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := "http://" + closedPort(t) + "/dir"
			release := make(chan struct{})
			switch {
			case tt.hang:
				ts := fakeUpstream(t, func(http.ResponseWriter, *http.Request) { <-release })
				dir = ts.URL + "/dir"
			case tt.answer != nil:
				dir = fakeUpstream(t, tt.answer).URL + "/dir"
			}
			defer close(release)
			s := &Signer{opts: Options{Directory: dir}}
			rec := &recorder{base: http.DefaultTransport, now: time.Now}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if tt.hang {
				ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			}
			defer cancel()
			_, err := s.client(rec).NewAccount(ctx, acme.Account{PrivateKey: key, TermsOfServiceAgreed: true})
			if err == nil {
				t.Fatal("the upstream call succeeded")
			}
			f := noSecrets.classify(err, rec.lastResponse())
			if f.refusal != tt.refusal {
				t.Errorf("classify's refusal for the client = %d; want %d\nerror: %v", f.refusal, tt.refusal, err)
			}
			if f.verdict != tt.want || f.after != tt.after || f.forgetAccount != tt.forgetAccount {
				t.Errorf("classify = %s after %s (forget account %v); want %s after %s (%v)\nerror: %v",
					f.verdict, f.after, f.forgetAccount, tt.want, tt.after, tt.forgetAccount, err)
			}
			if !strings.Contains(f.reason, tt.reasonHas) {
				t.Errorf("reason %q; want it to hold %q", f.reason, tt.reasonHas)
			}
			out := outcomeFor(f, f.reason)
			if got := out.String(); !strings.HasPrefix(got, tt.outcome) {
				t.Errorf("outcome %q; want it to start with %q", got, tt.outcome)
			}
			if f.after > 0 && f.verdict != giveUp {
				if spends := out == jobs.RetryNoSooner(f.reason, f.after); spends != tt.spends {
					t.Errorf("the wait of outcome %q spends the attempt: %v; want %v", out, spends, tt.spends)
				}
			}
		})
	}
}

func TestOurOwnPermanentFailuresAreNotRetried(t *testing.T) {
	s := &Signer{opts: Options{Challenge: ChallengeDNS01}}
	_, err := s.pick(acme.Authorization{Identifier: acme.Identifier{Type: "dns", Value: "a.example.com"},
		Challenges: []acme.Challenge{{Type: "http-01"}, {Type: "tls-alpn-01"}}})
	if err == nil {
		t.Fatal("picked a dns-01 challenge the upstream does not offer")
	}
	if !strings.Contains(err.Error(), "offers no dns-01 challenge for a.example.com (it offers: http-01, tls-alpn-01)") {
		t.Errorf("error %q does not say what is missing", err)
	}
	if f := noSecrets.classify(fmt.Errorf("solving: %w", err), response{}); f.verdict != giveUp {
		t.Errorf("a missing challenge type is %s; want give up", f.verdict)
	}

	s.opts.Challenge = ChallengeHTTP01
	if _, err := s.pick(acme.Authorization{Identifier: acme.Identifier{Type: "dns", Value: "example.com"}, Wildcard: true,
		Challenges: []acme.Challenge{{Type: "dns-01"}}}); noSecrets.classify(err, response{}).verdict != giveUp {
		t.Errorf("a wildcard under http01: %v; want a permanent failure", err)
	}

	s.opts.Challenge = ChallengeBypass
	ch, err := s.pick(acme.Authorization{Challenges: []acme.Challenge{{Type: "tls-alpn-01"}, {Type: "http-01"}}})
	if err != nil || ch.Type != "tls-alpn-01" {
		t.Errorf("bypass picked %q (%v); want the first offered", ch.Type, err)
	}
	if !errors.As(permanent("x"), new(permanentError)) {
		t.Error("permanent does not make a permanentError")
	}
}

func TestRetryAfterIsReadAsSecondsOrAnHTTPDate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"30":                            30 * time.Second,
		"0":                             0,
		"-5":                            0,
		"soon":                          0,
		"Thu, 01 Jan 2026 00:02:00 GMT": 2 * time.Minute,
		"Wed, 31 Dec 2025 23:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q = %s; want %s", v, got, want)
		}
	}
	f := noSecrets.classify(acme.Problem{Type: acme.ProblemTypeRateLimited, Status: 429}, response{status: 429, retryAfter: 72 * time.Hour})
	if f.after != maxRetryAfter {
		t.Errorf("a 72h Retry-After is honoured as %s; want it capped at %s", f.after, maxRetryAfter)
	}
}

// A failure's reason is the relay job's last error, which the admin API
// and the web page show and the log line of the attempt repeats; a DNS
// provider's error may quote the URL of its API whole, and some take
// their token in it (DuckDNS: /update?domains=…&token=…, in Go's
// *url.Error and in its own "url: [...]" text). The reason names where
// the request went and the names of its parameters, never a value of its
// query nor the URL's user and password.
func TestAFailuresReasonKeepsNoSecretOfAURLItQuotes(t *testing.T) {
	const secret = "0f1e2d3c-aaaa-bbbb-cccc-secret-token"
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a transport error quoting the request's URL",
			fmt.Errorf("presenting the dns-01 challenge for a.example.com: adding temporary record for zone %q: %w", "example.com.",
				&url.Error{Op: "Get", URL: "https://www.duckdns.org/update?domains=a&token=" + secret + "&txt=x", Err: errors.New("dial tcp: i/o timeout")}),
			`Get "https://www.duckdns.org/update?domains&token&txt": dial tcp: i/o timeout`},
		{"a provider's own text quoting the URL",
			fmt.Errorf("presenting the dns-01 challenge for a.example.com: DuckDNS request failed, expected (OK) but got (KO), url: [https://www.duckdns.org/update?domains=a&token=%s&txt=x], body: KO", secret),
			"url: [https://www.duckdns.org/update?domains&token&txt], body: KO"},
		{"a URL's user and password",
			fmt.Errorf("calling the API: %w", &url.Error{Op: "Post", URL: "https://api:" + secret + "@dns.example/v1/records#frag", Err: io.ErrUnexpectedEOF}),
			`Post "https://dns.example/v1/records": unexpected EOF`},
		{"a query that does not parse",
			fmt.Errorf("calling https://dns.example/x?key=%s%%zz&a: failed", secret),
			"calling https://dns.example/x?key&a: failed"},
		{"a URL without secrets, as it is",
			fmt.Errorf("reading https://ca.example/acme/order/7: %w", io.ErrUnexpectedEOF),
			"reading https://ca.example/acme/order/7: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := noSecrets.classify(tt.err, response{})
			if strings.Contains(f.reason, secret) || !strings.Contains(f.reason, tt.want) {
				t.Errorf("reason %q; want it to say %q and not the secret", f.reason, tt.want)
			}
		})
	}
}

func TestAWaitTheUpstreamAsksForSpendsTheAttemptOnlyWhenItAnsweredWithAnError(t *testing.T) {
	tests := []struct {
		name string
		last response
		want jobs.Outcome
	}{
		// An order processing longer than an attempt waits in place: the
		// work takes that long, nothing failed.
		{"ok/an order still processing", response{status: 200, retryAfter: 5 * time.Minute}, jobs.RetryAfter("r", 5*time.Minute)},
		{"fail/503 in maintenance", response{status: 503, retryAfter: time.Second}, jobs.RetryNoSooner("r", time.Second)},
		{"fail/429 rate limited", response{status: 429, retryAfter: time.Minute}, jobs.RetryAfter("r", time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcomeFor(noSecrets.classify(errors.New("waited"), tt.last), "r"); got != tt.want {
				t.Errorf("outcome %q (%+v); want %+v", got, got, tt.want)
			}
		})
	}
}

// What a client is told of an upstream's refusal about its name is the
// upstream's detail, without the relay's secrets and the upstream's own
// URLs, bounded; a refusal about anything else gets a generic detail.
func TestTheClientIsToldTheUpstreamsDetailOfARefusalAboutItsNameAndNothingSecret(t *testing.T) {
	r := newSecrets("https://relay:pa55word@ca.example:14000/dir?token=s3cretToken", "")
	long := strings.Repeat("x", 2*maxRefusalDetail)
	tests := []struct {
		name   string
		err    error
		want   string
		absent []string
	}{
		{"ok/a challenge's CAA problem names the name",
			nameProblem{name: "www.example.com", Problem: acme.Problem{Type: acme.ProblemTypeCAA, Detail: "CAA record for example.com prevents issuance"}},
			"the upstream CA could not validate www.example.com: CAA record for example.com prevents issuance", nil},
		{"ok/an answer's CAA problem",
			acme.Problem{Type: acme.ProblemTypeCAA, Detail: "CAA record for example.com prevents issuance"},
			"the upstream CA refused: CAA record for example.com prevents issuance", nil},
		{"ok/a URL at the client's name is kept",
			nameProblem{name: "www.example.com", Problem: acme.Problem{Type: acme.ProblemTypeConnection, Detail: "Fetching http://www.example.com/.well-known/acme-challenge/x: Timeout"}},
			"the upstream CA could not validate www.example.com: Fetching http://www.example.com/.well-known/acme-challenge/x: Timeout", nil},
		{"ok/the upstream's URLs and the relay's secrets are cut",
			nameProblem{name: "www.example.com", Problem: acme.Problem{Type: acme.ProblemTypeDNS,
				Detail: "DNS problem for account https://ca.example:14000/acct/7 (token s3cretToken, pa55word)"}},
			"the upstream CA could not validate www.example.com: DNS problem for account (an upstream URL) (token REDACTED, REDACTED)",
			[]string{"s3cretToken", "pa55word", "acct/7"}},
		{"ok/a long detail is cut",
			acme.Problem{Type: acme.ProblemTypeCAA, Detail: long},
			"the upstream CA refused: " + long[:maxRefusalDetail-len("…")] + "…", nil},
		{"ok/a refused CSR gets a generic detail", acme.Problem{Type: acme.ProblemTypeBadCSR, Detail: "key too small"}, "", nil},
		{"ok/the relay's wrong answer is no refusal", nameProblem{name: "www.example.com",
			Problem: acme.Problem{Type: acme.ProblemTypeUnauthorized, Detail: "Incorrect TXT record"}}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := r.classify(permanentError{fmt.Errorf("the upstream could not validate it: %w", tt.err)}, response{})
			if f.refusalDetail != tt.want {
				t.Errorf("the client's detail:\n %q\nwant\n %q", f.refusalDetail, tt.want)
			}
			for _, s := range tt.absent {
				if strings.Contains(f.refusalDetail, s) {
					t.Errorf("the client's detail %q shows %q", f.refusalDetail, s)
				}
			}
		})
	}
}
