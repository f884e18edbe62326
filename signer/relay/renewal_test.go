package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// ariUpstream is an upstream whose directory offers renewalInfo (unless
// told not to) and answers every certID with window, asking to be read
// again after retryAfter; it counts the renewalInfo requests.
type ariUpstream struct {
	srv        *httptest.Server
	start, end atomic.Pointer[time.Time]
	reads      atomic.Int32
	// explanation is the explanationURL of each answer; "" for none.
	explanation atomic.Pointer[string]
}

func newARIUpstream(t *testing.T, offer bool, retryAfter string) *ariUpstream {
	t.Helper()
	u := &ariUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/dir":
			dir := map[string]string{"newNonce": u.srv.URL + "/nonce", "newAccount": u.srv.URL + "/account", "newOrder": u.srv.URL + "/order"}
			if offer {
				dir["renewalInfo"] = u.srv.URL + "/ari"
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(dir)
		case strings.HasPrefix(r.URL.Path, "/ari/"):
			u.reads.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", retryAfter)
			answer := map[string]any{"suggestedWindow": map[string]time.Time{"start": *u.start.Load(), "end": *u.end.Load()}}
			if e := u.explanation.Load(); e != nil && *e != "" {
				answer["explanationURL"] = *e
			}
			_ = json.NewEncoder(w).Encode(answer)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *ariUpstream) setWindow(start, end time.Time) { u.start.Store(&start); u.end.Store(&end) }

// issuedLeaf is a leaf with an authority key identifier, as an upstream
// issues.
func issuedLeaf(t *testing.T) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, SubjectKeyId: []byte{1, 2, 3, 4}}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(0x1234567), NotBefore: now, NotAfter: now.Add(time.Hour),
		DNSNames: []string{"a.example.com"}}, ca, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func TestTheUpstreamsWindowIsKeptUntilItsRetryAfterAndThenReadAgain(t *testing.T) {
	up := newARIUpstream(t, true, "3600")
	b := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
	ctx := context.Background()
	leaf := issuedLeaf(t)
	start := b.clock.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	up.setWindow(start, start.Add(time.Hour))

	info, err := b.s.RenewalInfo(ctx, leaf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Start.Equal(start) || !info.End.Equal(start.Add(time.Hour)) {
		t.Errorf("window %v – %v; want the upstream's %v – %v", info.Start, info.End, start, start.Add(time.Hour))
	}
	if info.RetryAfter > time.Hour || info.RetryAfter < time.Hour-time.Minute {
		t.Errorf("RetryAfter %v; want the upstream's hour", info.RetryAfter)
	}

	// Half an hour on, the upstream has moved the window: the kept one
	// is answered, with what is left of the hour.
	up.setWindow(start.Add(time.Hour), start.Add(2*time.Hour))
	b.clock.Advance(30 * time.Minute)
	info, err = b.s.RenewalInfo(ctx, leaf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Start.Equal(start) || up.reads.Load() != 1 {
		t.Errorf("within Retry-After: window from %v after %d upstream reads; want the kept %v after 1", info.Start, up.reads.Load(), start)
	}
	if info.RetryAfter > 30*time.Minute || info.RetryAfter < 29*time.Minute {
		t.Errorf("RetryAfter %v half an hour on; want what is left of the hour", info.RetryAfter)
	}

	// Once the hour is over, the upstream is asked again.
	b.clock.Advance(31 * time.Minute)
	info, err = b.s.RenewalInfo(ctx, leaf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Start.Equal(start.Add(time.Hour)) || up.reads.Load() != 2 {
		t.Errorf("after Retry-After: window from %v after %d upstream reads; want the moved %v after 2", info.Start, up.reads.Load(), start.Add(time.Hour))
	}
}

// RFC 9773 §4.3.2: a client treats a Retry-After under a minute as a
// minute and one over a day as a day. The relay, a client of the
// upstream, keeps the upstream's window that long, and tells its own
// clients no more: an upstream asking for a year (or for more seconds
// than a time.Duration holds) would otherwise keep every client from
// seeing an incident's early window for that long, and one asking for
// none would send each client's request on upstream.
func TestTheUpstreamsRetryAfterHoldsItsWindowFromAMinuteToADay(t *testing.T) {
	cases := []struct {
		name, retryAfter string
		want             time.Duration
	}{
		{"ok/an hour", "3600", time.Hour},
		{"ok/none is the default", "", ariDefaultHold},
		{"fail/a year is a day", "31536000", 24 * time.Hour},
		{"fail/more seconds than a duration holds is a day", "9223372037", 24 * time.Hour},
		{"fail/a date in year 9999 is a day", "Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour},
		{"fail/a second is a minute", "1", time.Minute},
		{"fail/zero is a minute", "0", time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newARIUpstream(t, true, tc.retryAfter)
			b := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
			start := b.clock.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
			up.setWindow(start, start.Add(time.Hour))
			info, err := b.s.RenewalInfo(context.Background(), issuedLeaf(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if info.RetryAfter > tc.want || info.RetryAfter < tc.want-time.Minute/2 {
				t.Errorf("Retry-After %q: the window holds for %v; want %v", tc.retryAfter, info.RetryAfter, tc.want)
			}
		})
	}
}

// The clients' operators are shown the explanation URL: one from the
// upstream that is no plain web page is not passed on, and its window
// still is.
func TestTheUpstreamsExplanationURLIsPassedOnOnlyWhenItIsAWebPage(t *testing.T) {
	cases := []struct {
		name, url, want string
	}{
		{"ok/an https page", "https://status.example.org/incident/42", "https://status.example.org/incident/42"},
		{"ok/an http page", "http://status.example.org/", "http://status.example.org/"},
		{"fail/a javascript link", "javascript:alert(1)", ""},
		{"fail/a data URL", "data:text/html,<script>alert(1)</script>", ""},
		{"fail/a relative path", "/incident/42", ""},
		{"fail/credentials in it", "https://user:pass@status.example.org/", ""},
		{"fail/longer than the bound", "https://status.example.org/" + strings.Repeat("a", signer.MaxExplanationURL), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newARIUpstream(t, true, "3600")
			b := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
			start := b.clock.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
			up.setWindow(start, start.Add(time.Hour))
			up.explanation.Store(&tc.url)
			info, err := b.s.RenewalInfo(context.Background(), issuedLeaf(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if info.ExplanationURL != tc.want {
				t.Errorf("explanation URL %q passed on as %q; want %q", tc.url, info.ExplanationURL, tc.want)
			}
			if !info.Start.Equal(start) {
				t.Errorf("window from %v; want the upstream's %v", info.Start, start)
			}
		})
	}
}

func TestAnUpstreamWithoutRenewalInfoAnswersNoRenewalInfo(t *testing.T) {
	up := newARIUpstream(t, false, "3600")
	b := newBench(t, up.srv.URL+"/dir", ChallengeBypass)
	up.setWindow(time.Now(), time.Now().Add(time.Hour))
	for i := range 2 {
		if _, err := b.s.RenewalInfo(context.Background(), issuedLeaf(t), nil); !errors.Is(err, signer.ErrNoRenewalInfo) {
			t.Errorf("read %d: %v; want signer.ErrNoRenewalInfo", i, err)
		}
	}
	if n := up.reads.Load(); n != 0 {
		t.Errorf("the upstream's renewalInfo was read %d times; it offers none", n)
	}
}

// An upstream may refuse "replaces" while it would take the order: it
// already counts the certificate as replaced (a local order that failed
// after its upstream order was placed), the certificate was issued to the
// relay's earlier upstream account (it registered again) or by another
// upstream CA (the directory changed; Pebble after a restart). The relay
// orders again without "replaces", and the certificate is renewed all
// the same; a refusal that is not about "replaces", or a rate limit, is
// answered as it was.
func TestAnUpstreamRefusingReplacesGetsTheOrderWithoutIt(t *testing.T) {
	const certID = "AQIDBA.ASNFZw"
	for _, tc := range []struct {
		name string
		// withReplaces and without answer the upstream newOrder with
		// and without "replaces"; nil creates the order.
		withReplaces, without http.HandlerFunc
		wantReplaces          []string
		wantErr               bool
	}{
		{"ok/already replaced upstream", problemAnswer(http.StatusConflict, acme.ProblemTypeAlreadyReplaced, "already replaced"), nil,
			[]string{certID, ""}, false},
		{"ok/another upstream account's certificate", problemAnswer(http.StatusForbidden, acme.ProblemTypeUnauthorized,
			"requester account did not request the certificate being replaced by this order"), nil, []string{certID, ""}, false},
		{"ok/a certificate another upstream CA issued", problemAnswer(http.StatusNotFound, acme.ProblemTypeMalformed,
			"request included `replaces` field, but no current certificate with serial exists"), nil, []string{certID, ""}, false},
		{"ok/Pebble's answer for a certificate it does not know", problemAnswer(http.StatusInternalServerError, acme.ProblemTypeServerInternal,
			"could not find an order for the given certificate"), nil, []string{certID, ""}, false},
		{"fail/a refusal of the order itself is answered", problemAnswer(http.StatusBadRequest, acme.ProblemTypeRejectedIdentifier, "no"),
			problemAnswer(http.StatusBadRequest, acme.ProblemTypeRejectedIdentifier, "no"), []string{certID, ""}, true},
		{"fail/a rate limit is not asked again", problemAnswer(http.StatusTooManyRequests, acme.ProblemTypeRateLimited, "slow down"), nil,
			[]string{certID}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				srv      *httptest.Server
				mu       sync.Mutex
				replaces []string
			)
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Replay-Nonce", fmt.Sprintf("nonce-%d", time.Now().UnixNano()))
				switch r.URL.Path {
				case "/dir":
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(map[string]string{"newNonce": srv.URL + "/nonce", "newAccount": srv.URL + "/account",
						"newOrder": srv.URL + "/order", "renewalInfo": srv.URL + "/ari"})
				case "/nonce":
				case "/order":
					var jws struct {
						Payload string `json:"payload"`
					}
					var order struct {
						Replaces string `json:"replaces"`
					}
					body, _ := io.ReadAll(r.Body)
					if json.Unmarshal(body, &jws) == nil {
						if p, err := base64.RawURLEncoding.DecodeString(jws.Payload); err == nil {
							_ = json.Unmarshal(p, &order)
						}
					}
					mu.Lock()
					replaces = append(replaces, order.Replaces)
					mu.Unlock()
					answer := tc.without
					if order.Replaces != "" {
						answer = tc.withReplaces
					}
					if answer != nil {
						answer(w, r)
						return
					}
					w.Header().Set("Location", srv.URL+"/order/1")
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					_ = json.NewEncoder(w).Encode(map[string]any{"status": "pending", "identifiers": []any{}, "authorizations": []string{}, "finalize": srv.URL + "/finalize/1"})
				default:
					http.NotFound(w, r)
				}
			}))
			t.Cleanup(srv.Close)
			b := newBench(t, srv.URL+"/dir", ChallengeBypass)
			ctx := context.Background()
			req := b.finalized(t, "renew.example.com")
			ro, _, err := b.db.CreateRelayOrder(ctx, store.NewRelayOrder{OrderID: req.OrderID, Profile: "p", CSR: req.CSRDER}, b.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			ro.Replaces = certID
			bd, log, err := b.s.binding()
			if err != nil {
				t.Fatal(err)
			}
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			acct := acme.Account{Location: srv.URL + "/account/1", PrivateKey: key}
			c := b.s.client(&recorder{base: b.s.transport, now: b.clock.Now})
			order, gate, err := b.s.newOrder(ctx, c, acct, bd, log, ro, nil, "")
			mu.Lock()
			// Each in a row once: acmez tries a 5xx again itself.
			got := slices.Compact(slices.Clone(replaces))
			mu.Unlock()
			if !slices.Equal(got, tc.wantReplaces) {
				t.Errorf("the upstream newOrders replace %q; want %q", got, tc.wantReplaces)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatalf("newOrder created upstream order %q; want the upstream's refusal", order.Location)
				}
				return
			}
			if err != nil {
				t.Fatalf("newOrder: %v", err)
			}
			if _, err := gate.wait(ctx); err != nil {
				t.Fatalf("recording the upstream order: %v", err)
			}
			stored, err := b.db.GetRelayOrder(ctx, ro.OrderID)
			if err != nil {
				t.Fatal(err)
			}
			if order.Location != srv.URL+"/order/1" || stored.UpstreamOrderURL != order.Location {
				t.Errorf("upstream order %q, recorded %q; want %s/order/1 recorded", order.Location, stored.UpstreamOrderURL, srv.URL)
			}
		})
	}
}
