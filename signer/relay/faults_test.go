package relay

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/internal/testdns"
)

// These tests put the relay in front of an upstream that misbehaves the
// way real ACME CAs do: Pebble's own fault knobs where it has one, a
// small front of the test's where it has none.

func TestEveryRelayedOrderIsIssuedWhenTheUpstreamRejectsHalfTheNoncesItIsSent(t *testing.T) {
	ctx := context.Background()
	b := pebbleBenchOn(t, newPebbleUpstreamOf(t, pebbleKnobs{nonceReject: 50}))
	for _, name := range []string{"n1.example.com", "n2.example.com", "n3.example.com", "n4.example.com"} {
		req := b.finalized(t, name)
		if _, err := b.s.Issue(ctx, req); err != nil {
			t.Fatal(err)
		}
		// Every request is sent again with the nonce of its badNonce
		// answer (RFC 8555 §6.5), ten times at most (as acmez does): an
		// attempt fails for it about once in a hundred, and the next
		// attempt carries on.
		var outcomes []string
		for len(outcomes) < 3 {
			out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
			if outcomes = append(outcomes, out); out == "done" {
				break
			}
		}
		if outcomes[len(outcomes)-1] != "done" {
			t.Fatalf("relay of %s: %q; want done", name, outcomes)
		}
		chain := b.settler.issued[req.OrderID]
		leaf, err := x509.ParseCertificate(chain[0])
		if err != nil || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != name {
			t.Fatalf("relay of %s: leaf %v (%v)", name, leaf, err)
		}
	}
}

func TestADownloadIsSentAgainForAsLongABadNonceStreakAsTheRelaysOtherRequests(t *testing.T) {
	// acmez sends every other upstream request up to ten times while
	// the upstream answers badNonce; a download gets as many.
	const streak = 9
	var downloads atomic.Int32
	bad := problemAnswer(http.StatusBadRequest, acme.ProblemTypeBadNonce, "stale nonce", "Replay-Nonce", "fresh-nonce")
	up := validOrderUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if downloads.Add(1) <= streak {
			bad(w, r)
			return
		}
		refuse(w, r) // the test has seen the download through the streak
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "dl.example.com")
	if _, err := b.s.Issue(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(context.Background(), b.job(t, req.OrderID)).String()
	if !strings.Contains(out, "refused by the test") {
		t.Errorf("outcome %q after %d downloads; want the answer to the download after %d badNonce answers", out, downloads.Load(), streak)
	}
}

func TestAnUpstreamAccountDeactivatedFailsEachOrderAtOnceNamingIt(t *testing.T) {
	ctx := context.Background()
	b, up := pebbleBench(t)
	b.relayThrough(t, "first.example.com")
	ra, err := b.db.GetRelayAccount(ctx, b.s.issuerKey, "p")
	if err != nil {
		t.Fatal(err)
	}
	id := ra.Location[strings.LastIndex(ra.Location, "/")+1:]
	acct := up.db.GetAccountByID(id)
	acct.Status = acme.StatusDeactivated // as its holder or the CA did
	if err := up.db.UpdateAccountByID(id, acct); err != nil {
		t.Fatal(err)
	}

	// The relay never replaces an account on its own (a new key would
	// evade a CA's decision); each order fails after one attempt, its
	// reason saying why.
	req := b.finalized(t, "second.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	job := b.job(t, req.OrderID)
	out := b.s.RunJob(ctx, job).String()
	if !strings.HasPrefix(out, "failed: ") || !strings.Contains(out, "unauthorized - Account has been deactivated") {
		t.Errorf("the relay's outcome is %q; want it failed, naming the deactivated account", out)
	}
	if err := b.s.AbandonJob(ctx, job, strings.TrimPrefix(out, "failed: ")); err != nil {
		t.Fatal(err)
	}
	if got := b.settler.failed[req.OrderID]; len(got) != 1 || !strings.Contains(got[0], "Account has been deactivated") {
		t.Errorf("the order's failure detail is %q; want the upstream's reason", got)
	}
	if n := up.count("POST order-plz"); n != 2 {
		t.Errorf("Pebble saw %d newOrders; want 2 (one per relay, no second try)", n)
	}
}

func TestARelayRegistersAgainAtAnUpstreamThatForgotItsAccount(t *testing.T) {
	ctx := context.Background()
	b, up := pebbleBench(t)
	b.relayThrough(t, "first.example.com")
	before, err := b.db.GetRelayAccount(ctx, b.s.issuerKey, "p")
	if err != nil {
		t.Fatal(err)
	}
	up.restart() // a Pebble restarted, a CA's database reset: accountDoesNotExist

	req := b.finalized(t, "second.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	first := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	if !strings.HasPrefix(first, "retry: ") || !strings.Contains(first, "accountDoesNotExist") {
		t.Errorf("the first attempt is %q; want a retry naming accountDoesNotExist", first)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("the next attempt is %q; want done", out)
	}
	after, err := b.db.GetRelayAccount(ctx, b.s.issuerKey, "p")
	if err != nil {
		t.Fatal(err)
	}
	if after.KeyPEM != before.KeyPEM || after.Location == "" || after.Location == before.Location {
		t.Errorf("the account afterwards: same key %v, location %q; want the same key registered again", after.KeyPEM == before.KeyPEM, after.Location)
	}
}

func TestAnUpstreamAnswerLargerThanAnyACMEResourceIsNotReadToItsEnd(t *testing.T) {
	// A gateway serving a file, or a broken upstream, answering with
	// megabytes where an order takes a few hundred bytes: acmez reads
	// an answer whole into memory, so the relay's client stops reading
	// it and the attempt is retried like any answer that is not ACME's.
	var up *httptest.Server
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/order":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", up.URL+"/order/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"valid","identifiers":[{"type":"dns","value":"big.example.com"}],"finalize":"` + up.URL + `/finalize/1","certificate":"` + up.URL + `/cert/1"}`))
			// JSON ends where the blanks begin: the answer parses
			// whole, however long.
			_, _ = w.Write(bytes.Repeat([]byte(" "), 3*maxAnswerBytes))
		default:
			refuse(w, r) // the relay read the order to its end
		}
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "big.example.com")
	if _, err := b.s.Issue(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(context.Background(), b.job(t, req.OrderID)).String()
	if !strings.HasPrefix(out, "retry: ") || !strings.Contains(out, fmt.Sprintf("larger than %d bytes", maxAnswerBytes)) {
		t.Errorf("outcome %q; want a retry saying the answer is too large", out)
	}
}

func TestAnUpstreamAnswerIsReadWholeUpToItsBoundAndNoFurther(t *testing.T) {
	tests := []struct {
		name string
		size int
		ok   bool
	}{
		{"ok/empty", 0, true},
		{"ok/exactly the bound", maxAnswerBytes, true},
		{"fail/one byte more", maxAnswerBytes + 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := &boundedBody{body: io.NopCloser(bytes.NewReader(make([]byte, tt.size))), left: maxAnswerBytes, bound: maxAnswerBytes, what: "answer"}
			got, err := io.ReadAll(body)
			if tt.ok && (err != nil || len(got) != tt.size) {
				t.Errorf("read %d of %d bytes (%v); want all", len(got), tt.size, err)
			}
			if !tt.ok && err == nil {
				t.Errorf("read %d of %d bytes without an error; want the bound's", len(got), tt.size)
			}
		})
	}
}

func TestARelayIsIssuedWhateverQuirkOfPebbleItMeets(t *testing.T) {
	tests := []struct {
		name  string
		knobs pebbleKnobs
		// intermediates is how many issuers the chain holds.
		intermediates int
	}{
		{"ok/authorizations reused", pebbleKnobs{authzReuse: 100}, 1},
		{"ok/a chain of three intermediates", pebbleKnobs{chainLength: 3}, 3},
		{"ok/alternate roots with two intermediates", pebbleKnobs{alternates: 2, chainLength: 2}, 2},
		// The VA takes up to a second; authorizations being validated
		// and orders processing say Retry-After (as seconds or as an
		// HTTP date, at random).
		{"ok/slow validation with Retry-After", pebbleKnobs{vaSleep: 2, retryAfter: 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			up := newPebbleUpstreamOf(t, tt.knobs)
			b := pebbleBenchOn(t, up)
			// A second order for the same name finds its authorization
			// valid when the upstream reuses it.
			for _, name := range []string{"q.example.com", "q.example.com"} {
				req := b.finalized(t, name)
				if _, err := b.s.Issue(ctx, req); err != nil {
					t.Fatal(err)
				}
				if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
					t.Fatalf("relay of %s: %s", name, out)
				}
				if chain := b.settler.issued[req.OrderID]; len(chain) != 1+tt.intermediates {
					t.Errorf("a chain of %d certificates; want the leaf and %d issuers", len(chain), tt.intermediates)
				}
			}
			if tt.knobs.authzReuse == 100 {
				if n := up.count("POST chalZ"); n != 1 {
					t.Errorf("Pebble saw %d challenges answered; want 1 (the second order's authorization reused)", n)
				}
			}
		})
	}
}

func TestAnUpstreamOrderWhoseAuthorizationExpiredFailsTheRelaySayingSo(t *testing.T) {
	ctx := context.Background()
	b, up := pebbleBench(t)
	req := b.finalized(t, "late.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	// An attempt placed the upstream order and recorded it, then the
	// upstream went away for longer than its pending authorizations
	// live (an hour at Pebble).
	bd, log, err := b.s.binding()
	if err != nil {
		t.Fatal(err)
	}
	ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := b.s.account(ctx, b.s.upstream, bd.Profile)
	if err != nil {
		t.Fatal(err)
	}
	order, gate, err := b.s.newOrder(ctx, b.s.upstream, acct, bd, log, ro, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.wait(ctx); err != nil {
		t.Fatal(err)
	}
	gate.finish()
	expired := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	for _, u := range order.Authorizations {
		authz := up.db.GetAuthorizationByID(u[strings.LastIndex(u, "/")+1:])
		authz.Lock()
		authz.ExpiresDate, authz.Expires = expired, expired.Format(time.RFC3339)
		authz.Unlock()
	}

	out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	want := "its authorization for late.example.com expired at " + expired.Format(time.RFC3339)
	if !strings.HasPrefix(out, "failed: ") || !strings.Contains(out, want) {
		t.Errorf("outcome %q; want it failed, saying %q", out, want)
	}
}

func TestARetryAfterGivenAsAnHTTPDateIsWaitedOutLikeOneInSeconds(t *testing.T) {
	ctx := context.Background()
	var date atomic.Value
	up := fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		problemAnswer(http.StatusTooManyRequests, acme.ProblemTypeRateLimited, "too many new orders", "Retry-After", date.Load().(string))(w, r)
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	// An HTTP date has whole seconds: the bench's clock is set on one.
	now := b.clock.Now()
	b.clock.Advance(now.Truncate(time.Second).Add(time.Second).Sub(now))
	date.Store(b.clock.Now().Add(150 * time.Second).UTC().Format(http.TimeFormat))
	req := b.finalized(t, "date.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); !strings.HasPrefix(out, "retry after 2m30s: ") {
		t.Errorf("outcome %q; want to wait until the upstream's date, 2m30s", out)
	}
}

func TestAChallengeThatFailsUpstreamFailsTheRelayOnceSayingWhy(t *testing.T) {
	ctx := context.Background()
	d, err := testdns.Start("example.com.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	// Pebble really validates http-01: at 127.0.0.1, on a port where
	// nothing answers.
	_, port, _ := net.SplitHostPort(closedPort(t))
	httpPort, _ := strconv.Atoi(port)
	up := newPebbleUpstreamOf(t, pebbleKnobs{vaDNS: d.Addr, vaHTTPPort: httpPort})
	b := newBench(t, up.srv.URL+wfe.DirectoryPath, ChallengeHTTP01, func(o *Options) {
		o.Transport = up.srv.Client().Transport
		o.FinalizeWait = -1
	})
	req := b.finalized(t, "unreachable.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	if !strings.HasPrefix(out, "failed: ") || !strings.Contains(out, "could not validate unreachable.example.com by http-01") ||
		!strings.Contains(out, "urn:ietf:params:acme:error:connection") {
		t.Errorf("outcome %q; want it failed with the upstream's validation error", out)
	}
	if n := up.count("POST chalZ"); n != 1 {
		t.Errorf("Pebble saw %d challenge answers; want 1", n)
	}
}

func TestAnUpstreamOrderWhoseValidAuthorizationOutlivedItselfFailsTheRelaySayingSo(t *testing.T) {
	ctx := context.Background()
	b, up := pebbleBench(t)
	req := b.finalized(t, "outlived.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	// An attempt placed the upstream order and answered its challenge,
	// then failed at the finalize; the attempts after it failed for
	// longer than a valid authorization lives upstream (an hour at
	// Pebble), which then calls the order invalid, stating no error.
	bd, log, err := b.s.binding()
	if err != nil {
		t.Fatal(err)
	}
	ro, err := b.db.GetRelayOrder(ctx, req.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := b.s.account(ctx, b.s.upstream, bd.Profile)
	if err != nil {
		t.Fatal(err)
	}
	order, gate, err := b.s.newOrder(ctx, b.s.upstream, acct, bd, log, ro, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.wait(ctx); err != nil {
		t.Fatal(err)
	}
	gate.finish()
	rec := &recorder{base: b.s.transport, now: b.clock.Now}
	if _, err := b.s.authorize(withRecorder(ctx, rec), b.s.upstream, rec, acct, order, req.OrderID); err != nil {
		t.Fatal(err)
	}
	expired := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	for _, u := range order.Authorizations {
		authz := up.db.GetAuthorizationByID(u[strings.LastIndex(u, "/")+1:])
		authz.Lock()
		if authz.Status != acme.StatusValid {
			t.Errorf("the upstream authorization is %s; want it valid", authz.Status)
		}
		authz.ExpiresDate, authz.Expires = expired, expired.Format(time.RFC3339)
		authz.Unlock()
	}

	out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	want := "its authorization for outlived.example.com expired at " + expired.Format(time.RFC3339)
	if !strings.HasPrefix(out, "failed: ") || !strings.Contains(out, want) {
		t.Errorf("outcome %q; want it failed, saying %q", out, want)
	}
}

func TestAnUpstreamOrderInvalidForItsOwnExpiryFailsTheRelaySayingSo(t *testing.T) {
	ctx := context.Background()
	expired := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	// An upstream that calls an order invalid once it expired, its
	// authorizations valid still (Boulder's), stating no error.
	var up *httptest.Server
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/order", "/order/1":
			w.Header().Set("Location", up.URL+"/order/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"invalid","expires":"` + expired.Format(time.RFC3339) +
				`","identifiers":[{"type":"dns","value":"gone.example.com"}],"authorizations":[],"finalize":"` + up.URL + `/finalize/1"}`))
		default:
			http.NotFound(w, r)
		}
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass, func(o *Options) { o.FinalizeWait = -1 })
	req := b.finalized(t, "gone.example.com")
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String()
	want := "is invalid: it expired at " + expired.Format(time.RFC3339)
	if !strings.HasPrefix(out, "failed: ") || !strings.Contains(out, want) {
		t.Errorf("outcome %q; want it failed, saying %q", out, want)
	}
}
