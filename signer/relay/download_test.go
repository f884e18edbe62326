package relay

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/letsencrypt/pebble/v2/ca"
	pebbledb "github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/mholt/acmez/v3/acme"
)

// pebbleUpstream is an in-process Pebble over HTTPS that validates
// nothing (every challenge it is asked to check is valid at once) and
// checks every JWS, counting the requests it serves by method and path
// kind ("POST authZ", "HEAD nonce-plz", "GET renewalInfo", …).
type pebbleUpstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int
	// certs, when set, rewrites the body of each certificate download.
	certs func(t *testing.T, chain []byte) []byte
	// certHeader, when set, rewrites the header of each certificate
	// download's answer, of status code.
	certHeader func(code int, h http.Header)
	// pebble serves the requests; db is its store (see restart).
	pebble http.Handler
	db     *pebbledb.MemoryStore
	knobs  pebbleKnobs
}

func newPebbleUpstream(t *testing.T) *pebbleUpstream {
	t.Helper()
	return newPebbleUpstreamWithAlternates(t, 0)
}

// newPebbleUpstreamWithAlternates is newPebbleUpstream whose certificates
// come with alternates more chains, each to a root of its own (as a
// cross-signed issuer's do).
func newPebbleUpstreamWithAlternates(t *testing.T, alternates int) *pebbleUpstream {
	t.Helper()
	return newPebbleUpstreamOf(t, pebbleKnobs{alternates: alternates})
}

// pebbleKnobs are the faults and quirks a pebbleUpstream is started
// with: Pebble's own environment variables and constructor arguments.
type pebbleKnobs struct {
	alternates  int // more chains, each to a root of its own (PEBBLE_ALTERNATE_ROOTS)
	chainLength int // intermediates in a chain (PEBBLE_CHAIN_LENGTH); 0: one
	nonceReject int // percent of valid nonces rejected as badNonce (PEBBLE_WFE_NONCEREJECT)
	authzReuse  int // percent of orders reusing a valid authorization (PEBBLE_AUTHZREUSE)
	// vaSleep, when set, makes the VA wait up to vaSleep-1 seconds before
	// validating (PEBBLE_VA_SLEEPTIME), instead of not at all.
	vaSleep int
	// retryAfter is the Retry-After, in seconds, of an authorization
	// being validated and of an order processing (pebble -retry-after-*).
	retryAfter int
	// vaDNS, when set, is the DNS server through which the VA really
	// validates, connecting for http-01 to vaHTTPPort; else every
	// challenge is valid untried (PEBBLE_VA_ALWAYS_VALID).
	vaDNS      string
	vaHTTPPort int
}

// newPebbleUpstreamOf is newPebbleUpstream with the given knobs.
func newPebbleUpstreamOf(t *testing.T, k pebbleKnobs) *pebbleUpstream {
	t.Helper()
	// Pebble reads these in va.New and wfe.New.
	t.Setenv("PEBBLE_VA_ALWAYS_VALID", strconv.FormatBool(k.vaDNS == ""))
	t.Setenv("PEBBLE_VA_NOSLEEP", strconv.FormatBool(k.vaSleep == 0))
	t.Setenv("PEBBLE_VA_SLEEPTIME", strconv.Itoa(k.vaSleep))
	t.Setenv("PEBBLE_WFE_NONCEREJECT", strconv.Itoa(k.nonceReject))
	t.Setenv("PEBBLE_AUTHZREUSE", strconv.Itoa(k.authzReuse))
	if k.chainLength == 0 {
		k.chainLength = 1
	}
	u := &pebbleUpstream{n: map[string]int{}, knobs: k}
	u.restart()
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.Path, "/")
		if strings.HasPrefix(path, "draft-") { // draft-ietf-acme-ari-03/renewalInfo/…
			_, path, _ = strings.Cut(path, "/")
		}
		kind, _, _ := strings.Cut(path, "/")
		u.mu.Lock()
		u.n[r.Method+" "+kind]++
		rewrite, header := u.certs, u.certHeader
		h := u.pebble
		u.mu.Unlock()
		if kind != "certZ" || rewrite == nil && header == nil {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.Header().Del("Content-Length")
		if header != nil {
			header(rec.Code, w.Header())
		}
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		if rewrite != nil {
			body = rewrite(t, body)
		}
		w.Write(body)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// restart puts a new Pebble behind the upstream's address, knowing
// nothing of the accounts, orders and certificates of the one before (as
// a Pebble restarted does).
func (u *pebbleUpstream) restart() {
	logger := log.New(io.Discard, "", 0)
	db := pebbledb.NewMemoryStore()
	cai := ca.New(logger, db, "", "ecdsa", u.knobs.alternates, u.knobs.chainLength, map[string]ca.Profile{"default": {Description: "default"}})
	wfei := wfe.New(logger, db, va.New(logger, cmp.Or(u.knobs.vaHTTPPort, 80), 443, false, u.knobs.vaDNS, db), cai, nil, false, false, u.knobs.retryAfter, u.knobs.retryAfter)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pebble, u.db = wfei.Handler(), db
}

func (u *pebbleUpstream) count(what string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n[what]
}

func (u *pebbleUpstream) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	clear(u.n)
}

// relayThrough runs one relay of a new order for name to its end.
func (b *bench) relayThrough(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	req := b.finalized(t, name)
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("relay of %s: %s", name, out)
	}
	chain := b.settler.issued[req.OrderID]
	if len(chain) < 2 {
		t.Fatalf("relay of %s: a chain of %d certificates; want the leaf and its issuer", name, len(chain))
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != name {
		t.Fatalf("relay of %s: leaf %v (%v)", name, leaf, err)
	}
}

func pebbleBench(t *testing.T) (*bench, *pebbleUpstream) {
	t.Helper()
	up := newPebbleUpstream(t)
	return pebbleBenchOn(t, up), up
}

// pebbleBenchOn is a bench relaying to up.
func pebbleBenchOn(t *testing.T, up *pebbleUpstream) *bench {
	t.Helper()
	return newBench(t, up.srv.URL+wfe.DirectoryPath, ChallengeBypass, func(o *Options) {
		o.Transport = up.srv.Client().Transport
		o.FinalizeWait = -1 // the test runs the job itself
	})
}

func TestARelayAsksTheUpstreamOnlyWhatItUses(t *testing.T) {
	b, up := pebbleBench(t)
	b.relayThrough(t, "first.example.com") // registers the account
	up.reset()
	b.relayThrough(t, "second.example.com")
	// The renewal information acmez's download would read is not the
	// relay's to use; the order read after the challenge says that its
	// one authorization is valid, so it is not read again.
	for what, want := range map[string]int{
		"GET renewalInfo":     0,
		"POST authZ":          1,
		"POST chalZ":          1,
		"POST order-plz":      1,
		"POST finalize-order": 1,
		"POST certZ":          1,
	} {
		if got := up.count(what); got != want {
			t.Errorf("%s: %d requests for one relay; want %d", what, got, want)
		}
	}
}

func TestTheRelaysDownloadsNeedNoNonceRequestOfTheirOwn(t *testing.T) {
	b, up := pebbleBench(t)
	b.relayThrough(t, "warm.example.com")
	up.reset()
	for _, name := range []string{"a.example.com", "b.example.com", "c.example.com"} {
		b.relayThrough(t, name)
	}
	// Each answer carries the next nonce: acmez's pool and the
	// download's stash refill themselves.
	if n := up.count("HEAD nonce-plz"); n != 0 {
		t.Errorf("%d nonce requests in three relays; want 0", n)
	}
}

// validOrderUpstream is an upstream whose order is valid at once and
// whose certificate URL answers cert.
func validOrderUpstream(t *testing.T, cert http.HandlerFunc) *httptest.Server {
	t.Helper()
	var up *httptest.Server
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/order", "/order/1":
			w.Header().Set("Location", up.URL+"/order/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"valid","identifiers":[{"type":"dns","value":"dl.example.com"}],"finalize":"` + up.URL + `/finalize/1","certificate":"` + up.URL + `/cert/1"}`))
		case "/cert/1":
			cert(w, r)
		default:
			http.NotFound(w, r)
		}
	})
	return up
}

func TestADownloadRefusedForItsNonceIsSentAgainWithTheFreshOne(t *testing.T) {
	var (
		mu     sync.Mutex
		nonces []string
	)
	bad := problemAnswer(http.StatusBadRequest, acme.ProblemTypeBadNonce, "stale nonce", "Replay-Nonce", "fresh-nonce")
	up := validOrderUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var jws struct{ Protected string }
		_ = json.NewDecoder(r.Body).Decode(&jws)
		hdr, _ := b64json(jws.Protected)
		mu.Lock()
		nonces = append(nonces, hdr["nonce"])
		first := len(nonces) == 1
		mu.Unlock()
		if first {
			bad(w, r)
			return
		}
		refuse(w, r) // the test has seen the retry
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "dl.example.com")
	if _, err := b.s.Issue(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(context.Background(), b.job(t, req.OrderID)).String()
	if !strings.Contains(out, "refused by the test") {
		t.Errorf("outcome %q; want the answer to the retried download", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(nonces) != 2 || nonces[1] != "fresh-nonce" {
		t.Errorf("download nonces %q; want a retry with the badNonce answer's fresh-nonce", nonces)
	}
}

// b64json decodes a JWS's protected header, keeping its string members.
func b64json(s string) (map[string]string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out, nil
}

func TestAPreparedUpstreamOrderIsRecordedByTheTimeItsPreparationEndsAndIsTheOneRelayed(t *testing.T) {
	ctx := context.Background()
	b, up := pebbleBench(t)
	b.s.opts.PrepareUpstream = true
	b.relayThrough(t, "warm.example.com")
	up.reset()
	bd, log, err := b.s.binding()
	if err != nil {
		t.Fatal(err)
	}
	var prepared string
	req := b.finalizedAfter(t, "prep.example.com", func(orderID string) {
		// Its record is written beside the upstream challenge; once the
		// preparation is over, it names the upstream order.
		b.s.runPrepare(ctx, bd, log, orderID)
		if prepared, err = b.s.preparedUpstream(ctx, b.binding(t), orderID); err != nil || prepared == "" {
			t.Fatalf("after the preparation the record names %q (%v); want the upstream order", prepared, err)
		}
	})
	if up.count("POST chalZ") != 1 {
		t.Errorf("the preparation answered %d upstream challenges; want 1", up.count("POST chalZ"))
	}
	if _, err := b.s.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if out := b.s.RunJob(ctx, b.job(t, req.OrderID)).String(); out != "done" {
		t.Fatalf("relay: %s", out)
	}
	if n := up.count("POST order-plz"); n != 1 {
		t.Errorf("%d upstream orders placed; want 1, the prepared one relayed", n)
	}
	if ro, err := b.db.GetRelayOrder(ctx, req.OrderID); err != nil || ro.UpstreamOrderURL != prepared {
		t.Errorf("relayed %q (%v); want the prepared %q", ro.UpstreamOrderURL, err, prepared)
	}
}

func TestAnOrderInvalidAfterItsChallengeFailsTheRelayWithTheAuthorizationsReason(t *testing.T) {
	var (
		up       *httptest.Server
		mu       sync.Mutex
		answered bool
	)
	up = registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		done := answered
		mu.Unlock()
		status := "pending"
		if done {
			status = "invalid"
		}
		switch r.URL.Path {
		case "/order", "/order/1":
			w.Header().Set("Location", up.URL+"/order/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"status":"` + status + `","identifiers":[{"type":"dns","value":"bad.example.com"}],"authorizations":["` + up.URL + `/authz/1"],"finalize":"` + up.URL + `/finalize/1"}`))
		case "/authz/1":
			chal := `{"type":"http-01","url":"` + up.URL + `/chal/1","token":"tok","status":"pending"}`
			if done {
				chal = `{"type":"http-01","url":"` + up.URL + `/chal/1","token":"tok","status":"invalid","error":{"type":"urn:ietf:params:acme:error:connection","detail":"the test refused the connection"}}`
			}
			_, _ = w.Write([]byte(`{"status":"` + status + `","identifier":{"type":"dns","value":"bad.example.com"},"challenges":[` + chal + `]}`))
		case "/chal/1":
			mu.Lock()
			answered = true
			mu.Unlock()
			_, _ = w.Write([]byte(`{"type":"http-01","url":"` + up.URL + `/chal/1","token":"tok","status":"processing"}`))
		default:
			http.NotFound(w, r)
		}
	})
	b := newBench(t, up.URL+"/dir", ChallengeBypass)
	req := b.finalized(t, "bad.example.com")
	if _, err := b.s.Issue(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	out := b.s.RunJob(context.Background(), b.job(t, req.OrderID)).String()
	if !strings.HasPrefix(out, "failed: ") || !strings.Contains(out, "the test refused the connection") {
		t.Errorf("outcome %q; want the relay failed with the upstream challenge's error", out)
	}
}
