package acmeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// racedPost is one signed request of a race: its target and its body,
// signed (with its own nonce) before the race starts.
type racedPost struct {
	url  string
	body []byte
}

// race sends every request at once — each from its own goroutine, all
// released together by one barrier — and returns the answers in order.
func (e *testEnv) race(posts []racedPost) []rawResponse {
	e.t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		out   = make([]rawResponse, len(posts))
		errs  = make([]error, len(posts))
	)
	client := e.ts.Client()
	for i, p := range posts {
		wg.Go(func() {
			<-start
			resp, err := client.Post(p.url, "application/jose+json", bytes.NewReader(p.body))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = rawResponse{status: resp.StatusCode, header: resp.Header, body: b}
		})
	}
	close(start)
	wg.Wait()
	for i := range out {
		if errs[i] != nil {
			e.t.Fatalf("raced request %d: %v", i, errs[i])
		}
		if strings.HasPrefix(out[i].header.Get("Content-Type"), problem.ContentType) {
			out[i].problem = &problem.Problem{}
			if err := json.Unmarshal(out[i].body, out[i].problem); err != nil {
				e.t.Fatalf("raced request %d: problem document does not parse: %v: %s", i, err, out[i].body)
			}
		}
	}
	return out
}

// signed is c's request to target with payload, signed now for a race.
func (c *rawClient) signed(target string, payload any, o jwsOpts) racedPost {
	c.t.Helper()
	var p []byte
	if payload != nil {
		p = marshal(c.t, payload)
	}
	return racedPost{url: target, body: c.sign(target, p, o)}
}

// times is n copies of one request, each signed with a nonce of its own.
func times(n int, sign func() racedPost) []racedPost {
	out := make([]racedPost, n)
	for i := range out {
		out[i] = sign()
	}
	return out
}

// isProblem reports whether r is a problem of the given status and type.
func isProblem(r rawResponse, status int, typ acme.ProblemType) bool {
	return r.status == status && r.problem != nil && r.problem.Type == typ
}

// statusOf is the "status" member of a resource answered in r.
func statusOf(r rawResponse) string {
	var s struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(r.body, &s)
	return s.Status
}

const racers = 20

// RFC 8555 §7.3.1: a new-account with a key that has an account answers
// 200 with that account's URL. Twenty at once with one new key make one
// account; the other nineteen find it — also under an accounts_per_ip
// limit that twenty new accounts would not pass, since only one is made.
// The server's clock is a meetGate, so every registration has found the
// key without an account before any creates it.
func TestNewAccountsWithOneKeyAtOnceMakeOneAccount(t *testing.T) {
	tests := []struct {
		name string
		set  func(*LimitsConfig)
	}{
		{"without limits", func(*LimitsConfig) {}},
		{"under accounts_per_ip of 2", func(l *LimitsConfig) { l.AccountsPerIP = rate(2, time.Hour) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				gate := &meetGate{at: ".(*Authority).CreateAccount"}
				e, _, _ := limitEnv(t, tc.set, func(eo *envOptions) {
					opts := eo.opts
					eo.opts = func(o *Options) { opts(o); gate.Clock, o.Clock = o.Clock, gate }
				})
				gate.expect(racers)
				newAccountsWithOneKeyAtOnce(t, e)
				if n := gate.met(); n != racers {
					t.Errorf("%d of %d registrations reached authority.CreateAccount's clock reading together", n, racers)
				}
			})
		})
	}
}

func newAccountsWithOneKeyAtOnce(t *testing.T, e *testEnv) {
	{
		c := e.rawClient()
		posts := times(racers, func() racedPost {
			return c.signed(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
		})
		created, loc := 0, ""
		for i, r := range e.race(posts) {
			switch {
			case r.status == http.StatusCreated:
				created++
			case r.status == http.StatusOK:
			default:
				t.Fatalf("new-account %d answered %d %s", i, r.status, r.body)
			}
			if l := r.header.Get("Location"); loc == "" {
				loc = l
			} else if l != loc {
				t.Errorf("new-account %d answered Location %q, another %q", i, l, loc)
			}
		}
		if created != 1 {
			t.Errorf("%d new-accounts answered 201; want exactly one", created)
		}
	}
}

// RFC 8555 §6.5: a nonce is accepted once. Twenty requests carrying one
// nonce at once: one is served, the others are badNonce.
func TestOneNonceSentByManyRequestsAtOnceIsAcceptedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		for _, tc := range []struct {
			name string
			sign func(nonce string) racedPost
		}{
			{"signed by kid", func(n string) racedPost { return alice.signed(alice.kid, nil, jwsOpts{nonce: &n}) }},
			{"signed by jwk", func(n string) racedPost {
				return alice.signed(e.url("/new-account"), map[string]any{"onlyReturnExisting": true}, jwsOpts{nonce: &n, embedJWK: true})
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				n := alice.nonce()
				posts := times(racers, func() racedPost { return tc.sign(n) })
				ok := 0
				for i, r := range e.race(posts) {
					switch {
					case r.status == http.StatusOK:
						ok++
					case isProblem(r, http.StatusBadRequest, acme.ErrorBadNonce):
					default:
						t.Errorf("request %d answered %d %s", i, r.status, r.body)
					}
				}
				if ok != 1 {
					t.Errorf("%d requests with one nonce were served; want exactly one", ok)
				}
			})
		}
	})
}

// RFC 8555 §7.3.6: an account deactivates once. Whatever else arrives
// signed by it at the same moment — more deactivations, contact updates,
// reads — is answered as before or after the deactivation (200, or 401
// unauthorized), never as a fault; and one account_deactivated row is
// written.
func TestAnAccountDeactivatedByManyRequestsAtOnceIsDeactivatedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		for round := range 3 {
			alice := e.rawClient()
			alice.register()
			var posts []racedPost
			for i := range racers {
				switch i % 3 {
				case 0, 1:
					posts = append(posts, alice.signed(alice.kid, map[string]any{"status": "deactivated"}, jwsOpts{}))
				default:
					posts = append(posts, alice.signed(alice.kid, map[string]any{"contact": []string{fmt.Sprintf("mailto:ops%d@example.com", i)}}, jwsOpts{}))
				}
			}
			for i, r := range e.race(posts) {
				if r.status != http.StatusOK && !isProblem(r, http.StatusUnauthorized, acme.ErrorUnauthorized) {
					t.Errorf("round %d: request %d answered %d %s; want 200 or 401 unauthorized", round, i, r.status, r.body)
				}
			}
			if rows := auditRows(t, e.db, store.AuditFilter{Event: acme.EventAccountDeactivated, AccountID: path.Base(alice.kid)}); len(rows) != 1 {
				t.Errorf("round %d: %d account_deactivated rows; want 1", round, len(rows))
			}
			wantProblem(t, alice.read(alice.kid), http.StatusUnauthorized, acme.ErrorUnauthorized)
		}
	})
}

// The same interleaving, step by step: a deactivation or a contact
// update whose request was verified while the account was valid, and
// which reaches the store after another request deactivated it, is
// answered as a request of a deactivated account (401 unauthorized).
func TestAnAccountChangeReachingTheStoreAfterADeactivationIsUnauthorized(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		ctx := context.Background()
		tests := []struct {
			name   string
			change func(au *authority.Authority, id string) error
		}{
			{"a second deactivation", func(au *authority.Authority, id string) error {
				_, err := au.DeactivateAccount(ctx, id, authority.Client{IP: "127.0.0.1"})
				return err
			}},
			{"a contact update", func(au *authority.Authority, id string) error {
				_, err := au.UpdateAccountContact(ctx, id, []string{"mailto:late@example.com"})
				return err
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				alice := e.rawClient()
				alice.register()
				if r := alice.post(alice.kid, map[string]any{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
					t.Fatalf("deactivation: %d %s", r.status, r.body)
				}
				err := tc.change(e.srv.Authority(), path.Base(alice.kid))
				if p, ok := problem.As(err); !ok || p.Status != http.StatusUnauthorized || p.Type != acme.ErrorUnauthorized {
					t.Fatalf("got %v; want a 401 unauthorized problem", err)
				}
			})
		}
	})
}

// countingSigner is the local CA, counting its Issue calls.
type countingSigner struct {
	*localca.Signer
	issued atomic.Int32
}

func (c *countingSigner) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	c.issued.Add(1)
	return c.Signer.Issue(ctx, req)
}

// RFC 8555 §7.4: twenty finalizes of one ready order at once sign once:
// one certificate, one signer call, one certificate_issued row; each
// answer is the order (processing or valid) or 403 orderNotReady.
func TestTwentyFinalizesOfOneOrderAtOnceSignOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		sg := &countingSigner{}
		e := newTestEnvWith(t, envOptions{wrap: func(l *localca.Signer) signer.Signer { sg.Signer = l; return sg }})
		alice := e.rawClient()
		alice.register()
		o := alice.readyOrder("twenty.example.com")
		csr := newCSR(t, newKey(t), "", []string{"twenty.example.com"}, nil)
		posts := times(racers, func() racedPost {
			return alice.signed(o.Finalize, map[string]string{"csr": b64(csr)}, jwsOpts{})
		})
		won := 0
		for i, r := range e.race(posts) {
			switch {
			case r.status == http.StatusOK && (statusOf(r) == "valid" || statusOf(r) == "processing"):
				won++
			case isProblem(r, http.StatusForbidden, acme.ErrorOrderNotReady):
			default:
				t.Errorf("finalize %d answered %d %s", i, r.status, r.body)
			}
		}
		if won != 1 {
			t.Errorf("%d finalizes answered with the order; want 1", won)
		}
		if n := sg.issued.Load(); n != 1 {
			t.Errorf("the signer was called %d times; want once", n)
		}
		if rows := auditRows(t, e.db, store.AuditFilter{Event: acme.EventCertificateIssued, OrderID: path.Base(o.url)}); len(rows) != 1 {
			t.Errorf("%d certificate_issued rows; want 1", len(rows))
		}
		if got := decodeAs[orderJSON](t, alice.read(o.url)); got.Status != "valid" || got.Certificate == "" {
			t.Errorf("the order reads %s %q", got.Status, got.Certificate)
		}
	})
}

// RFC 8555 §7.3.5: of two accounts rolling over to one new key at once,
// one gets it; the other is answered 409 with the URL of the account
// that holds the key, and keeps its own. The server's clock is a
// meetGate, so both have found the key free before either writes: only
// the write's unique key can then tell the winner.
func TestTwoAccountsRollingOverToOneKeyAtOnceOneWins(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		gate := &meetGate{Clock: clock.Real(), at: ".(*Authority).ChangeAccountKey"}
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = gate }})
		for round := range 3 {
			alice, bob := e.rawClient(), e.rawClient()
			alice.register()
			bob.register()
			nk := newKey(t)
			gate.expect(2)
			posts := []racedPost{
				alice.signed(e.url("/key-change"), json.RawMessage(innerKeyChange(t, e, innerSpec{signer: nk, account: alice.kid, oldKey: alice.key.Public()})), jwsOpts{}),
				bob.signed(e.url("/key-change"), json.RawMessage(innerKeyChange(t, e, innerSpec{signer: nk, account: bob.kid, oldKey: bob.key.Public()})), jwsOpts{}),
			}
			rs := e.race(posts)
			if n := gate.met(); n != 2 {
				t.Fatalf("round %d: %d of 2 key changes reached their write together; the gate looks for the clock reading in authority.ChangeAccountKey", round, n)
			}
			clients := []*rawClient{alice, bob}
			winner := -1
			for i, r := range rs {
				if r.status == http.StatusOK {
					if winner >= 0 {
						t.Fatalf("round %d: both key changes succeeded", round)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no key change succeeded: %d %s; %d %s", round, rs[0].status, rs[0].body, rs[1].status, rs[1].body)
			}
			loser := 1 - winner
			if r := rs[loser]; r.status != http.StatusConflict || r.header.Get("Location") != clients[winner].kid {
				t.Errorf("round %d: the losing key change answered %d Location %q %s; want 409 Location %q",
					round, r.status, r.header.Get("Location"), r.body, clients[winner].kid)
			}
			if r := clients[loser].read(clients[loser].kid); r.status != http.StatusOK {
				t.Errorf("round %d: the loser's old key stopped working: %d %s", round, r.status, r.body)
			}
			renewed := &rawClient{t: t, e: e, key: nk, kid: clients[winner].kid}
			if r := renewed.read(renewed.kid); r.status != http.StatusOK {
				t.Errorf("round %d: the winner's new key does not sign: %d %s", round, r.status, r.body)
			}
		}
	})
}

// RFC 8555 §7.3.5: an account rolled over by many key changes at once
// (each to a key of its own) ends on exactly one of them; the other key
// changes and the requests signed by the old key meanwhile are each
// served or refused (as a request signed by a key the account no longer
// has, or a key change whose old key is no longer the account's), never
// answered with a fault.
func TestKeyChangesOfOneAccountAtOnceLeaveItOnOneKey(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		keys := make([]*rawClient, 0, racers/2)
		var posts []racedPost
		for i := range racers {
			if i%2 == 0 {
				nk := newKey(t)
				keys = append(keys, &rawClient{t: t, e: e, key: nk, kid: alice.kid})
				posts = append(posts, alice.signed(e.url("/key-change"),
					json.RawMessage(innerKeyChange(t, e, innerSpec{signer: nk, account: alice.kid, oldKey: alice.key.Public()})), jwsOpts{}))
			} else {
				posts = append(posts, alice.signed(alice.kid, nil, jwsOpts{}))
			}
		}
		won := -1
		for i, r := range e.race(posts) {
			switch {
			case i%2 == 0 && r.status == http.StatusOK:
				if won >= 0 {
					t.Errorf("key changes %d and %d both succeeded", won, i)
				}
				won = i
			case r.status == http.StatusOK:
			case r.status >= 500 || r.problem == nil:
				t.Errorf("request %d answered %d %s", i, r.status, r.body)
			case i%2 == 0 && isProblem(r, http.StatusForbidden, acme.ErrorUnauthorized):
				// Its guard found the key changed.
			case !isProblem(r, http.StatusBadRequest, acme.ErrorMalformed):
				// Signed by a key the account no longer has when its
				// nonce was spent: as any request by an old key.
				t.Errorf("request %d answered %d %s", i, r.status, r.body)
			}
		}
		if won < 0 {
			t.Fatal("no key change succeeded")
		}
		for i, k := range keys {
			r := k.read(alice.kid)
			if want := i == won/2; (r.status == http.StatusOK) != want {
				t.Errorf("key %d (winner: %v) reads the account: %d %s", i, want, r.status, r.body)
			}
		}
		if r := alice.read(alice.kid); r.status == http.StatusOK {
			t.Error("the old key still signs for the account")
		}
	})
}

// meetGate is a server clock that holds the requests reading it from the
// function named by at (a suffix of its name, as callerIs matches) until
// as many as expected have arrived there, then lets them all go on at
// once: so each has passed whatever that function checks before its
// clock reading before any of them goes further. A request that never
// arrives leaves the others waiting at most two seconds.
type meetGate struct {
	clock.Clock
	at string

	mu       sync.Mutex
	expected int // racers of this round not arrived yet
	arrived  int
	open     chan struct{}
}

// expect arms the gate for a round of n racers.
func (g *meetGate) expect(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expected, g.arrived, g.open = n, 0, make(chan struct{})
}

// met is how many racers of the round arrived at the gate.
func (g *meetGate) met() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

func (g *meetGate) Now() time.Time {
	if callerIs(g.at) {
		g.mu.Lock()
		open := g.open
		if g.expected > 0 {
			g.arrived++
			if g.expected--; g.expected == 0 {
				close(g.open)
			}
		}
		g.mu.Unlock()
		if open != nil {
			select {
			case <-open:
			case <-time.After(2 * time.Second):
			}
		}
	}
	return g.Clock.Now()
}

// RFC 8555 §7.6: a certificate is revoked once. Twenty revoke-certs of
// it at once — by its account (kid) and by its own key (jwk), while the
// CRL is read — record one revocation: one 200, the others 400
// alreadyRevoked; one certificate_revoked row, and the CRL lists it once.
func TestTwentyRevocationsOfOneCertificateAtOnceRecordOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e := newTestEnv(t, nil)
		owner := e.client(ctx)
		raw := e.raw(owner)
		for round := range 2 {
			cert := e.issue(ctx, owner, fmt.Sprintf("revoke%d.example.com", round))
			payload := map[string]any{"certificate": b64(cert.der), "reason": 1}
			posts := make([]racedPost, racers)
			for i := range posts {
				o := jwsOpts{}
				if i%2 == 1 {
					o = jwsOpts{embedJWK: true, key: cert.key}
				}
				posts[i] = raw.signed(e.url("/revoke-cert"), payload, o)
			}
			// Relying parties read the CRL all the while (its cache is
			// shared by every request).
			stop := make(chan struct{})
			var readers sync.WaitGroup
			for range 4 {
				readers.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if resp, err := e.ts.Client().Get(e.url("/crl")); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
				})
			}
			answers := e.race(posts)
			close(stop)
			readers.Wait()
			ok := 0
			for i, r := range answers {
				switch {
				case r.status == http.StatusOK:
					ok++
				case isProblem(r, http.StatusBadRequest, acme.ErrorAlreadyRevoked):
				default:
					t.Errorf("round %d: revoke-cert %d answered %d %s", round, i, r.status, r.body)
				}
			}
			if ok != 1 {
				t.Errorf("round %d: %d revoke-certs succeeded; want 1", round, ok)
			}
			if rows := auditRows(t, e.db, store.AuditFilter{Event: acme.EventCertificateRevoked, OrderID: cert.order}); len(rows) != 1 {
				t.Errorf("round %d: %d certificate_revoked rows; want 1", round, len(rows))
			}
			crl := e.crl(lists(cert.leaf.SerialNumber))
			n := 0
			for _, en := range crl.RevokedCertificateEntries {
				if en.SerialNumber.Cmp(cert.leaf.SerialNumber) == 0 {
					n++
				}
			}
			if n != 1 {
				t.Errorf("round %d: the CRL lists the certificate %d times", round, n)
			}
		}
	})
}

// RFC 8555 §7.5.1: a challenge answered by twenty POSTs at once is
// validated once: every POST is answered 200 with the challenge, the
// client's server is asked once, and the challenge, its authorization and
// its order end valid, valid and ready.
func TestAChallengePostedTwentyTimesAtOnceIsValidatedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		var fetched atomic.Int32
		e.http01.before = func(string) { fetched.Add(1) }
		o := alice.order(dnsID("answer.example.com"))
		ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeHTTP01)
		e.http01.set(ch.Token, alice.keyAuthorization(ch.Token))
		posts := times(racers, func() racedPost { return alice.signed(ch.URL, map[string]any{}, jwsOpts{}) })
		for i, r := range e.race(posts) {
			if st := statusOf(r); r.status != http.StatusOK || (st != "pending" && st != "processing" && st != "valid") {
				t.Errorf("challenge POST %d answered %d %s", i, r.status, r.body)
			}
		}
		alice.await(o.Authorizations[0], "valid")
		alice.await(o.url, "ready")
		if got := decodeAs[challengeJSON](t, alice.read(ch.URL)); got.Status != "valid" {
			t.Errorf("the challenge is %s", got.Status)
		}
		if n := fetched.Load(); n != 1 {
			t.Errorf("the client's server was asked %d times for one challenge; want once", n)
		}
	})
}

// RFC 8555 §7.5.2: an authorization deactivated while its challenge is
// being validated stays deactivated and its order invalid, whatever the
// validation finds; no answer is a fault.
func TestAnAuthorizationDeactivatedWhileItsChallengeValidatesStaysDeactivated(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		o := alice.order(dnsID("deactivated.example.com"))
		az := o.Authorizations[0]
		ch := challengeOf(t, alice.authz(az), acme.ChallengeHTTP01)
		e.http01.set(ch.Token, alice.keyAuthorization(ch.Token))
		arrived, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		e.http01.before = func(string) {
			once.Do(func() { close(arrived) })
			<-release
		}
		post := alice.signed(ch.URL, map[string]any{}, jwsOpts{})
		answered := make(chan []rawResponse, 1)
		go func() { answered <- e.race([]racedPost{post}) }()
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the validation never asked the client's server")
		}
		if r := alice.post(az, map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK || statusOf(r) != "deactivated" {
			t.Errorf("deactivation: %d %s", r.status, r.body)
		}
		close(release)
		if r := (<-answered)[0]; r.status != http.StatusOK {
			t.Errorf("the challenge POST answered %d %s", r.status, r.body)
		}
		alice.await(ch.URL, "valid", "invalid")
		if got := alice.authz(az); got.Status != "deactivated" {
			t.Errorf("the authorization is %s; want deactivated", got.Status)
		}
		if got := statusOf(alice.read(o.url)); got != "invalid" {
			t.Errorf("the order is %s; want invalid", got)
		}
	})
}

// README "Limits": a limit holds under concurrency. Twenty requests at
// once against a limit of five: five go through, fifteen are refused 429
// rateLimited with a Retry-After.
func TestTwentyRequestsAtOnceAgainstALimitOfFiveAdmitFive(t *testing.T) {
	const limit = 5
	tests := []struct {
		name  string
		set   func(*LimitsConfig)
		posts func(e *testEnv) []racedPost
	}{
		{"orders_per_account", func(l *LimitsConfig) { l.OrdersPerAccount = rate(limit, time.Hour) },
			func(e *testEnv) []racedPost {
				c := e.rawClient()
				c.register()
				i := 0
				return times(racers, func() racedPost {
					i++
					return c.signed(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(fmt.Sprintf("o%d.example.com", i))}}, jwsOpts{})
				})
			}},
		{"pending_authorizations", func(l *LimitsConfig) { l.PendingAuthorizations = limitCap(limit) },
			func(e *testEnv) []racedPost {
				c := e.rawClient()
				c.register()
				i := 0
				return times(racers, func() racedPost {
					i++
					return c.signed(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(fmt.Sprintf("p%d.example.com", i))}}, jwsOpts{})
				})
			}},
		{"accounts_per_ip", func(l *LimitsConfig) { l.AccountsPerIP = rate(limit, time.Hour) },
			func(e *testEnv) []racedPost {
				return times(racers, func() racedPost {
					return e.rawClient().signed(e.url("/new-account"), map[string]any{"termsOfServiceAgreed": true}, jwsOpts{embedJWK: true})
				})
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				e, _, _ := limitEnv(t, tc.set)
				passed := 0
				for i, r := range e.race(tc.posts(e)) {
					switch {
					case r.status == http.StatusCreated:
						passed++
					case isProblem(r, http.StatusTooManyRequests, acme.ErrorRateLimited):
						if r.header.Get("Retry-After") == "" {
							t.Errorf("request %d: 429 without Retry-After", i)
						}
					default:
						t.Errorf("request %d answered %d %s", i, r.status, r.body)
					}
				}
				if passed != limit {
					t.Errorf("%d of %d requests went through a limit of %d", passed, racers, limit)
				}
			})
		})
	}
}

// RFC 8555 §7.1.2.1: an account's orders list, read page by page while
// the account creates more orders, lists each order that existed before
// the first page once, and no order twice.
func TestTheOrdersListReadWhileOrdersAreCreatedListsEachOrderOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		alice := e.rawClient()
		alice.register()
		before := map[string]bool{}
		for i := range ordersPageSize + 30 {
			before[alice.order(dnsID(fmt.Sprintf("before%d.example.com", i))).url] = true
		}
		// Orders created while the list is read, signed beforehand.
		more := make([]racedPost, 30)
		for i := range more {
			more[i] = alice.signed(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(fmt.Sprintf("during%d.example.com", i))}}, jwsOpts{})
		}
		done := make(chan []rawResponse, 1)
		go func() { done <- e.race(more) }()
		seen := map[string]bool{}
		next := alice.kid + "/orders"
		for next != "" {
			r := alice.read(next)
			if r.status != http.StatusOK {
				t.Fatalf("orders list %s: %d %s", next, r.status, r.body)
			}
			var page struct {
				Orders []string `json:"orders"`
			}
			_ = json.Unmarshal(r.body, &page)
			for _, u := range page.Orders {
				if seen[u] {
					t.Errorf("%s is listed twice", u)
				}
				seen[u] = true
			}
			next = ""
			for _, l := range r.header.Values("Link") {
				if strings.Contains(l, `rel="next"`) {
					next = l[strings.Index(l, "<")+1 : strings.Index(l, ">")]
				}
			}
		}
		for _, r := range <-done {
			if r.status != http.StatusCreated {
				t.Errorf("a new-order during the read answered %d %s", r.status, r.body)
			}
		}
		for u := range before {
			if !seen[u] {
				t.Errorf("%s, created before the read, is not listed", u)
			}
		}
	})
}

// holdGate is a server clock that holds each request reading it from the
// function named by at (a suffix, as callerIs matches) once it is armed,
// until released: so a test can run something else between a request's
// verification and its write.
type holdGate struct {
	clock.Clock
	at string

	mu      sync.Mutex
	armed   bool
	arrived chan struct{} // closed by the first request held
	release chan struct{}
}

// arm makes the gate hold the next requests reaching it.
func (g *holdGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.arrived, g.release = true, make(chan struct{}), make(chan struct{})
}

// open lets the held requests go on, and disarms the gate.
func (g *holdGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		g.armed = false
		close(g.release)
	}
}

func (g *holdGate) Now() time.Time {
	if callerIs(g.at) {
		g.mu.Lock()
		armed, arrived, release := g.armed, g.arrived, g.release
		if armed {
			select {
			case <-arrived:
			default:
				close(arrived)
			}
		}
		g.mu.Unlock()
		if armed {
			<-release
		}
	}
	return g.Clock.Now()
}

// RFC 8555 §7.3.6: once an account is deactivated the server MUST NOT
// accept further requests authorized by its key. A new-order verified
// just before its account was deactivated, and stored just after, is
// refused as a deactivated account's request is, and leaves no order
// behind: the deactivation invalidated every order the account had, and
// none is made pending after it.
func TestANewOrderRacingItsAccountsDeactivationLeavesNoPendingOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		gate := &holdGate{Clock: clock.Real(), at: ".(*Authority).CreateOrder"}
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = gate }})
		alice := e.rawClient()
		alice.register()
		post := alice.signed(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("late.example.com")}}, jwsOpts{})
		gate.arm()
		answered := make(chan []rawResponse, 1)
		go func() { answered <- e.race([]racedPost{post}) }()
		select {
		case <-gate.arrived:
		case <-time.After(10 * time.Second):
			gate.open()
			t.Fatal("the new-order never reached authority.CreateOrder's clock reading")
		}
		deactivation := alice.post(alice.kid, map[string]any{"status": "deactivated"}, jwsOpts{})
		gate.open()
		if deactivation.status != http.StatusOK {
			t.Fatalf("deactivation: %d %s", deactivation.status, deactivation.body)
		}
		r := (<-answered)[0]
		if !isProblem(r, http.StatusUnauthorized, acme.ErrorUnauthorized) {
			t.Errorf("the new-order answered %d %s; want 401 unauthorized", r.status, r.body)
		}
		orders, err := e.db.ListOrders(context.Background(), store.OrderFilter{AccountID: path.Base(alice.kid), Limit: store.MaxPage})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range orders {
			if o.Status != acme.StatusInvalid {
				t.Errorf("the deactivated account has a %s order %s", o.Status, o.ID)
			}
		}
	})
}
