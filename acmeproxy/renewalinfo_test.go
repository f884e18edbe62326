package acmeproxy

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"math/big"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// certIDOf is RFC 9773 §4.1's certID of leaf, built here by hand: the
// authority key identifier and the serial's DER content octets.
func certIDOf(leaf *x509.Certificate) string {
	serial := leaf.SerialNumber.Bytes()
	if serial[0]&0x80 != 0 {
		serial = append([]byte{0}, serial...)
	}
	return base64.RawURLEncoding.EncodeToString(leaf.AuthorityKeyId) + "." + base64.RawURLEncoding.EncodeToString(serial)
}

// renewalWindow is a renewalInfo answer, decoded.
type renewalWindow struct {
	SuggestedWindow struct {
		Start time.Time `json:"start"`
		End   time.Time `json:"end"`
	} `json:"suggestedWindow"`
	ExplanationURL *string `json:"explanationURL"`
}

// renewalInfo GETs the renewal information of certID.
func (e *testEnv) renewalInfo(certID string) rawResponse {
	e.t.Helper()
	return e.plain(http.MethodGet, e.url("/renewal-info/"+certID))
}

// window GETs the window of leaf, requiring a cacheable 200 answer with
// Retry-After and a window that does not end before it starts.
func (e *testEnv) window(leaf *x509.Certificate, wantRetryAfter string) renewalWindow {
	e.t.Helper()
	r := e.renewalInfo(certIDOf(leaf))
	if r.status != http.StatusOK {
		e.t.Fatalf("renewal-info: %d %s", r.status, r.body)
	}
	if got := r.header.Get("Retry-After"); got != wantRetryAfter {
		e.t.Errorf("Retry-After %q, want %q", got, wantRetryAfter)
	}
	if got := r.header.Get("Cache-Control"); got != "public, max-age="+wantRetryAfter {
		e.t.Errorf("Cache-Control %q, want a public answer for as long as its Retry-After", got)
	}
	if r.header.Get("Replay-Nonce") != "" {
		e.t.Error("a cacheable renewal-info answer carries a Replay-Nonce")
	}
	w := decodeAs[renewalWindow](e.t, r)
	if !w.SuggestedWindow.End.After(w.SuggestedWindow.Start) {
		e.t.Errorf("window %v – %v ends before it starts (RFC 9773 §4.2)", w.SuggestedWindow.Start, w.SuggestedWindow.End)
	}
	return w
}

func TestTheDirectoryNamesTheRenewalInfoResource(t *testing.T) {
	e := newTestEnv(t, nil)
	dir := decodeAs[map[string]any](t, e.plain(http.MethodGet, e.dirURL))
	if got, want := dir["renewalInfo"], e.url("/renewal-info"); got != want {
		t.Fatalf("directory renewalInfo %v, want %q", got, want)
	}
}

func TestAFreshCertificatesWindowLiesAroundThePointOfItsLifeTheProfileNames(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name           string
		cfg            *RenewalInfoConfig
		point          float64 // where the window should be centred
		wantRetryAfter string
	}{
		{"ok/by default in the last third, asked again in 6h", nil, 2.0 / 3, "21600"},
		{"ok/half way, asked again in an hour", &RenewalInfoConfig{Point: 0.5, RetryAfter: Duration(time.Hour)}, 0.5, "3600"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(c *ProfileConfig) { c.RenewalInfo = tc.cfg })
			leaf := e.issue(ctx, e.client(ctx), "fresh.example.com").leaf
			w := e.window(leaf, tc.wantRetryAfter)
			life := leaf.NotAfter.Sub(leaf.NotBefore)
			centre := leaf.NotBefore.Add(time.Duration(tc.point * float64(life)))
			// 1% of the lifetime either side (a second of rounding).
			for what, got := range map[string]time.Time{"start": w.SuggestedWindow.Start, "end": w.SuggestedWindow.End} {
				want := centre.Add(-life / 100)
				if what == "end" {
					want = centre.Add(life / 100)
				}
				if d := got.Sub(want); d < -time.Second || d > time.Second {
					t.Errorf("window %s %v, want %v (%v of a %v life, ±1%%)", what, got, want, tc.point, life)
				}
			}
			if w.ExplanationURL != nil {
				t.Errorf("an ordinary window has an explanationURL %q", *w.ExplanationURL)
			}
		})
	}
}

func TestARevokedCertificatesWindowLiesInThePast(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	crt := e.issue(ctx, c, "revoked.example.com")
	if err := c.RevokeCert(ctx, nil, crt.der, acme.CRLReasonKeyCompromise); err != nil {
		t.Fatal(err)
	}
	w := e.window(crt.leaf, "21600")
	if now := time.Now(); !w.SuggestedWindow.End.Before(now) {
		t.Fatalf("a revoked certificate's window ends %v, not before now (%v)", w.SuggestedWindow.End, now)
	}
}

func TestRenewEarlyMovesTheSelectedWindowsToNowWithTheExplanationAndNoOthers(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	chosen := e.issue(ctx, c, "a.fleet.example.com")
	also := e.issue(ctx, c, "b.fleet.example.com")
	left := e.issue(ctx, c, "elsewhere.example.com")
	op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
	const why = "https://status.example.com/ca-rotation"
	v, err := op.RenewEarly(ctx, operator.RenewEarlyRequest{Identifier: "*.fleet.example.com", ExplanationURL: why},
		authority.Actor{Kind: authority.ActorCLI, ID: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Certificates) != 2 {
		t.Fatalf("renew-early chose %d certificates, want the 2 below fleet.example.com: %+v", len(v.Certificates), v.Certificates)
	}
	now := time.Now()
	for _, crt := range []issued{chosen, also} {
		w := e.window(crt.leaf, "21600")
		if !w.SuggestedWindow.End.Before(now) {
			t.Errorf("%s: window ends %v, after the operator's request (%v)", crt.leaf.DNSNames[0], w.SuggestedWindow.End, now)
		}
		if w.ExplanationURL == nil || *w.ExplanationURL != why {
			t.Errorf("%s: explanationURL %v, want %q", crt.leaf.DNSNames[0], w.ExplanationURL, why)
		}
		evs, err := e.db.SearchAudit(ctx, store.AuditFilter{Event: vocab.EventRenewEarly, OrderID: crt.order})
		if err != nil || len(evs) != 1 || evs[0].ActorID != "ops" {
			t.Errorf("%s: audit rows %+v (%v); want one naming the operator", crt.leaf.DNSNames[0], evs, err)
		}
	}
	w := e.window(left.leaf, "21600")
	if !w.SuggestedWindow.Start.After(now) {
		t.Errorf("a certificate outside the selection has its window moved to %v", w.SuggestedWindow.Start)
	}
}

// A certID that is not one is refused as malformed (RFC 9773 §4.1), one
// naming no certificate of this profile's issuer as not found; every
// answer says when to ask again.
func TestRenewalInfoRefusesAMalformedCertIDAndAnUnknownOne(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	leaf := e.issue(ctx, e.client(ctx), "known.example.com").leaf
	aki := base64.RawURLEncoding.EncodeToString(leaf.AuthorityKeyId)
	serial := certIDOf(leaf)[len(aki)+1:]
	b64 := func(b ...byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	otherSerial := new(big.Int).Add(leaf.SerialNumber, big.NewInt(1))
	cases := []struct {
		name   string
		certID string
		status int
	}{
		{"fail/no dot", aki + serial, http.StatusBadRequest},
		{"fail/two dots", aki + "." + serial + ".AQ", http.StatusBadRequest},
		{"fail/padding", aki + "." + base64.URLEncoding.EncodeToString([]byte{1, 2}), http.StatusBadRequest},
		{"fail/standard base64's plus", aki + ".+A", http.StatusBadRequest},
		{"fail/bits past the last byte", aki + ".AR", http.StatusBadRequest},
		{"fail/an empty key identifier", "." + serial, http.StatusBadRequest},
		{"fail/an empty serial", aki + ".", http.StatusBadRequest},
		{"fail/a zero serial", aki + "." + b64(0), http.StatusBadRequest},
		{"fail/an unknown serial written without its sign octet", aki + "." + b64(0x80, 1), http.StatusNotFound},
		{"fail/a serial with a needless leading zero", aki + "." + b64(0, 1), http.StatusBadRequest},
		{"fail/a serial longer than 20 octets", aki + "." + b64(make21()...), http.StatusBadRequest},
		{"fail/a carriage return the base64 decoder would skip", aki + "." + serial + "%0D", http.StatusBadRequest},
		{"fail/far too long", aki + "." + strings.Repeat("A", 300), http.StatusBadRequest},
		{"fail/an unknown serial", aki + "." + certIDOf(&x509.Certificate{SerialNumber: otherSerial})[1:], http.StatusNotFound},
		{"fail/another issuer's key identifier", b64(1, 2, 3, 4) + "." + serial, http.StatusNotFound},
		{"fail/no certID at all", "", http.StatusNotFound},
		{"fail/a path of two segments", aki + "/" + serial, http.StatusNotFound},
		{"ok/the certificate's own certID", aki + "." + serial, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.renewalInfo(tc.certID)
			if r.status != tc.status {
				t.Fatalf("renewal-info/%s: %d %s, want %d", tc.certID, r.status, r.body, tc.status)
			}
			if tc.status != http.StatusOK && (r.problem == nil || r.problem.Type != vocab.ErrorMalformed) {
				t.Errorf("answered %s, want a malformed problem document", r.body)
			}
			if r.header.Get("Retry-After") != "21600" {
				t.Errorf("Retry-After %q on a %d answer; want the profile's 21600", r.header.Get("Retry-After"), r.status)
			}
		})
	}
}

// A client that writes a certificate's serial in its certID as the
// serial's magnitude alone (Go's big.Int.Bytes), without the zero octet
// DER puts before a first octet whose high bit is set, names that
// certificate all the same, as Boulder and Pebble read it: its
// renewalInfo is answered, and a newOrder that replaces it is taken and
// echoes what the client sent.
func TestACertIDWrittenWithoutTheSerialsSignOctetNamesTheCertificate(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	// Half of the random serials have their first octet's high bit set.
	var leaf *x509.Certificate
	for i := 0; i < 40 && leaf == nil; i++ {
		if l := e.issue(ctx, c, "www.example.com").leaf; l.SerialNumber.Bytes()[0]&0x80 != 0 {
			leaf = l
		}
	}
	if leaf == nil {
		t.Fatal("no certificate of 40 had a serial whose first octet's high bit is set")
	}
	magnitude := base64.RawURLEncoding.EncodeToString(leaf.AuthorityKeyId) + "." + base64.RawURLEncoding.EncodeToString(leaf.SerialNumber.Bytes())
	if magnitude == certIDOf(leaf) {
		t.Fatalf("the magnitude form %q is the DER form", magnitude)
	}
	if r := e.renewalInfo(magnitude); r.status != http.StatusOK {
		t.Fatalf("renewal-info/%s: %d %s, want 200", magnitude, r.status, r.body)
	}
	r := e.raw(c).post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("www.example.com")}, "replaces": magnitude}, jwsOpts{})
	if r.status != http.StatusCreated {
		t.Fatalf("a newOrder replacing %s: %d %s, want 201", magnitude, r.status, r.body)
	}
	if got := decodeAs[orderJSON](t, r).Replaces; got != magnitude {
		t.Errorf("the order echoes replaces %q, want %q as sent", got, magnitude)
	}
}

// make21 is a positive 21-octet serial (with no leading zero).
func make21() []byte {
	b := make([]byte, 21)
	b[0] = 0x7f
	return b
}

// RFC 9773 §5: a certificate already replaced by a finalized order is
// refused alreadyReplaced; while its replacement is live but not
// finalized, another order for it goes ahead, echoing "replaces" as §5
// says an accepted one MUST, without becoming the replacement (the
// server ignores the field for its bookkeeping), so an abandoned renewal
// blocks nothing and one replacement at a time is all the limits'
// exemption covers.
func TestAnOrderIsRefusedAsAReplacementOnlyOnceAnotherReplacementIsFinalized(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	old := e.issue(ctx, c, "www.example.com", "api.example.com")
	certID := certIDOf(old.leaf)
	alice := e.raw(c)
	newOrder := func(cl *rawClient, name, replaces string) rawResponse {
		return cl.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(name)}, "replaces": replaces}, jwsOpts{})
	}

	first := newOrder(alice, "www.example.com", certID)
	if first.status != http.StatusCreated {
		t.Fatalf("the first replacement: %d %s", first.status, first.body)
	}
	if got := decodeAs[orderJSON](t, first).Replaces; got != certID {
		t.Errorf("the new order echoes replaces %q, want %q", got, certID)
	}
	if got := decodeAs[orderJSON](t, alice.read(first.header.Get("Location"))).Replaces; got != certID {
		t.Errorf("the order read back echoes replaces %q, want %q", got, certID)
	}

	second := newOrder(alice, "api.example.com", certID)
	if second.status != http.StatusCreated {
		t.Fatalf("an order while the first replacement is pending: %d %s; want it to go ahead", second.status, second.body)
	}
	if got := decodeAs[orderJSON](t, second).Replaces; got != certID {
		t.Errorf("the second order echoes replaces %q, want %q (RFC 9773 §5: an accepted one MUST be reflected)", got, certID)
	}
	if got := decodeAs[orderJSON](t, alice.read(second.header.Get("Location"))).Replaces; got != certID {
		t.Errorf("the second order read back echoes replaces %q, want %q", got, certID)
	}

	// The first replacement finalized: now the certificate is replaced.
	o := createdOrder{url: first.header.Get("Location"), orderJSON: decodeAs[orderJSON](t, first)}
	if _, r := alice.answerHTTP01(o.Authorizations[0], ""); r.status != http.StatusOK {
		t.Fatalf("challenge POST: %d %s", r.status, r.body)
	}
	alice.await(o.Authorizations[0], "valid")
	alice.await(o.url, "ready")
	if r := alice.finalize(o, newCSR(t, newKey(t), "www.example.com", []string{"www.example.com"}, nil)); r.status != http.StatusOK {
		t.Fatalf("finalize: %d %s", r.status, r.body)
	}
	alice.await(o.url, "valid")
	wantProblem(t, newOrder(alice, "api.example.com", certID), http.StatusConflict, vocab.ErrorAlreadyReplaced)
}

// An abandoned replacement that became invalid frees the certificate for
// another order that replaces it.
func TestAReplacementThatBecameInvalidFreesTheCertificate(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	old := e.issue(ctx, c, "www.example.com")
	certID := certIDOf(old.leaf)
	alice := e.raw(c)
	order := func() rawResponse {
		return alice.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("www.example.com")}, "replaces": certID}, jwsOpts{})
	}
	first := order()
	if first.status != http.StatusCreated {
		t.Fatalf("the first replacement: %d %s", first.status, first.body)
	}
	if r := alice.post(decodeAs[orderJSON](t, first).Authorizations[0], map[string]string{"status": "deactivated"}, jwsOpts{}); r.status != http.StatusOK {
		t.Fatalf("deactivating the first replacement's authorization: %d %s", r.status, r.body)
	}
	again := order()
	if again.status != http.StatusCreated {
		t.Fatalf("a replacement after the first became invalid: %d %s", again.status, again.body)
	}
	if got := decodeAs[orderJSON](t, again).Replaces; got != certID {
		t.Errorf("the new replacement echoes replaces %q, want %q", got, certID)
	}
}

func TestAnOrderMayReplaceOnlyACertificateOfItsAccountSharingAnIdentifier(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	old := e.issue(ctx, c, "www.example.com")
	certID := certIDOf(old.leaf)
	aki := base64.RawURLEncoding.EncodeToString(old.leaf.AuthorityKeyId)
	cases := []struct {
		name     string
		by       *rawClient
		ident    string
		replaces string
		status   int
		typ      vocab.ProblemType
	}{
		{"fail/another account's certificate", e.raw(e.client(ctx)), "www.example.com", certID, http.StatusForbidden, vocab.ErrorUnauthorized},
		{"fail/no identifier in common", e.raw(c), "other.example.com", certID, http.StatusBadRequest, vocab.ErrorMalformed},
		{"fail/a malformed certID", e.raw(c), "www.example.com", "not-a-cert-id", http.StatusBadRequest, vocab.ErrorMalformed},
		{"fail/an unknown certificate", e.raw(c), "www.example.com", aki + ".AQ", http.StatusNotFound, vocab.ErrorMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.by.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(tc.ident)}, "replaces": tc.replaces}, jwsOpts{})
			wantProblem(t, r, tc.status, tc.typ)
		})
	}
	// None of the refusals took the certificate: its own account still
	// replaces it.
	r := e.raw(c).post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("www.example.com")}, "replaces": certID}, jwsOpts{})
	if r.status != http.StatusCreated {
		t.Fatalf("the owner's replacement after the refusals: %d %s", r.status, r.body)
	}
}

// windowSigner is a local CA whose backend has its own renewal windows
// (as a relay's upstream does): a fixed one, or none.
type windowSigner struct {
	*localca.Signer
	info signer.RenewalInfo
	err  error
}

func (w *windowSigner) RenewalInfo(context.Context, *x509.Certificate, [][]byte) (signer.RenewalInfo, error) {
	return w.info, w.err
}

func TestASignersOwnWindowIsAnsweredUnlessTheCertificateIsRevokedOrTheSignerHasNone(t *testing.T) {
	ctx := context.Background()
	upstream := signer.RenewalInfo{Start: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), End: time.Date(2030, 1, 3, 3, 4, 5, 0, time.UTC),
		ExplanationURL: "https://upstream.example/why", RetryAfter: 90 * time.Minute}
	cases := []struct {
		name    string
		err     error
		revoke  bool
		want    string // "signer", "computed" or "past"
		wantRA  string
		wantWhy string
	}{
		{"ok/the signer's window and Retry-After", nil, false, "signer", "5400", upstream.ExplanationURL},
		{"ok/a signer without a window leaves the computed one", signer.ErrNoRenewalInfo, false, "computed", "21600", ""},
		// Held minutes, not the profile's hours: the backend's window
		// may differ (an incident's early renewal), and clients should
		// see it soon after the backend answers again.
		{"ok/a failing signer leaves the computed one, held briefly", errors.New("upstream down"), false, "computed", "300", ""},
		{"ok/a revoked certificate's window is in the past whatever the signer says", nil, true, "past", "21600", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnvWith(t, envOptions{wrap: func(s *localca.Signer) signer.Signer {
				return &windowSigner{Signer: s, info: upstream, err: tc.err}
			}})
			c := e.client(ctx)
			crt := e.issue(ctx, c, "upstream.example.com")
			if tc.revoke {
				if err := c.RevokeCert(ctx, nil, crt.der, acme.CRLReasonSuperseded); err != nil {
					t.Fatal(err)
				}
			}
			w := e.window(crt.leaf, tc.wantRA)
			start, end := w.SuggestedWindow.Start, w.SuggestedWindow.End
			switch tc.want {
			case "signer":
				if !start.Equal(upstream.Start) || !end.Equal(upstream.End) {
					t.Errorf("window %v – %v, want the signer's %v – %v", start, end, upstream.Start, upstream.End)
				}
			case "computed":
				if !start.After(crt.leaf.NotBefore) || !end.Before(crt.leaf.NotAfter) {
					t.Errorf("window %v – %v, want one within the certificate's life", start, end)
				}
			case "past":
				if !end.Before(time.Now()) {
					t.Errorf("window %v – %v, want one in the past", start, end)
				}
			}
			got := ""
			if w.ExplanationURL != nil {
				got = *w.ExplanationURL
			}
			if got != tc.wantWhy {
				t.Errorf("explanationURL %q, want %q", got, tc.wantWhy)
			}
		})
	}
}

// An operator's renew-early request that selects nothing, or names a
// serial, issuer, identifier or explanation URL that cannot be one, is
// refused before anything is stamped.
func TestRenewEarlyRefusesARequestThatCannotSelectWhatItMeans(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	crt := e.issue(ctx, e.client(ctx), "kept.example.com")
	op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
	serial := crt.leaf.SerialNumber.Text(16)
	cases := []struct {
		name string
		req  operator.RenewEarlyRequest
	}{
		{"fail/nothing selected", operator.RenewEarlyRequest{ExplanationURL: "https://status.example.com/"}},
		{"fail/only a profile", operator.RenewEarlyRequest{Profile: "test"}},
		{"fail/a serial that is not hex", operator.RenewEarlyRequest{Serials: []string{serial, "xyz"}}},
		{"fail/a zero serial", operator.RenewEarlyRequest{Serials: []string{"00"}}},
		{"fail/an issuer that is not a key id", operator.RenewEarlyRequest{Issuer: "Caddy Local Authority"}},
		{"fail/an identifier pattern with a space", operator.RenewEarlyRequest{Identifier: "a b.example.com"}},
		{"fail/an explanation URL that is relative", operator.RenewEarlyRequest{Serials: []string{serial}, ExplanationURL: "/why"}},
		{"fail/an explanation URL with credentials", operator.RenewEarlyRequest{Serials: []string{serial}, ExplanationURL: "https://u:p@status.example.com/"}},
		{"fail/an explanation URL of another scheme", operator.RenewEarlyRequest{Serials: []string{serial}, ExplanationURL: "javascript:alert(1)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := op.RenewEarly(ctx, tc.req, authority.Actor{Kind: authority.ActorAdmin}); !errors.Is(err, operator.ErrInvalid) {
				t.Fatalf("RenewEarly(%+v): %v; want ErrInvalid", tc.req, err)
			}
		})
	}
	if w := e.window(crt.leaf, "21600"); !w.SuggestedWindow.Start.After(time.Now()) {
		t.Fatalf("a refused request moved the window to %v", w.SuggestedWindow.Start)
	}
	// The same serial, in upper case with colons, as openssl prints it.
	var colons []string
	for i := 0; i < len(serial); i += 2 {
		colons = append(colons, strings.ToUpper(serial[i:min(i+2, len(serial))]))
	}
	if len(serial)%2 == 1 {
		colons = []string{strings.ToUpper(serial)}
	}
	v, err := op.RenewEarly(ctx, operator.RenewEarlyRequest{Serials: []string{strings.Join(colons, ":")}}, authority.Actor{Kind: authority.ActorAdmin})
	if err != nil || len(v.Certificates) != 1 {
		t.Fatalf("RenewEarly by %s: %+v %v; want the certificate", strings.Join(colons, ":"), v, err)
	}
}

// A CA rotation: renew-early by the issuing CA's key id (as the CRL
// routes name it) selects every certificate that CA signed.
func TestRenewEarlyByIssuerSelectsEveryCertificateTheCASigned(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, nil)
	c := e.client(ctx)
	a, b := e.issue(ctx, c, "a.example.com"), e.issue(ctx, c, "b.example.com")
	op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
	v, err := op.RenewEarly(ctx, operator.RenewEarlyRequest{Issuer: strings.ToUpper(signer.CAKeyID(e.root))}, authority.Actor{Kind: authority.ActorAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Certificates) != 2 {
		t.Fatalf("renew-early by the issuer chose %+v; want both certificates", v.Certificates)
	}
	for _, crt := range []issued{a, b} {
		if w := e.window(crt.leaf, "21600"); !w.SuggestedWindow.End.Before(time.Now()) {
			t.Errorf("%s: window %v – %v, not in the past", crt.leaf.DNSNames[0], w.SuggestedWindow.Start, w.SuggestedWindow.End)
		}
	}
}

// replacesSigner is a local CA that remembers what each issue request
// said the order replaces.
type replacesSigner struct {
	*localca.Signer
	mu  sync.Mutex
	got map[string]string // order id → Replaces
}

func (r *replacesSigner) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	r.mu.Lock()
	r.got[req.OrderID] = req.Replaces
	r.mu.Unlock()
	return r.Signer.Issue(ctx, req)
}

// The signer learns which certificate an order replaces, so a backend
// that takes it (an upstream CA) can be told.
func TestTheSignerIsToldWhichCertificateAnOrderReplaces(t *testing.T) {
	ctx := context.Background()
	rs := &replacesSigner{got: map[string]string{}}
	e := newTestEnvWith(t, envOptions{wrap: func(s *localca.Signer) signer.Signer { rs.Signer = s; return rs }})
	c := e.client(ctx)
	old := e.issue(ctx, c, "www.example.com")
	certID := certIDOf(old.leaf)
	// x/crypto/acme cannot send "replaces": a raw new-order does, and
	// x/crypto/acme finishes it.
	r := e.raw(c).post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID("www.example.com")}, "replaces": certID}, jwsOpts{})
	if r.status != http.StatusCreated {
		t.Fatalf("new-order with replaces: %d %s", r.status, r.body)
	}
	o, err := c.GetOrder(ctx, r.header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	o = e.authorize(ctx, c, o)
	key := newKey(t)
	if _, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "", []string{"www.example.com"}, nil), false); err != nil {
		t.Fatal(err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if got := rs.got[path.Base(o.URI)]; got != certID {
		t.Errorf("the signer was told the order replaces %q, want %q", got, certID)
	}
	if got := rs.got[old.order]; got != "" {
		t.Errorf("the signer was told the first order replaces %q, want nothing", got)
	}
}

// renewalInfo is an unauthenticated GET that anyone may repeat as often
// as they like, for any certificate they have seen. A signer whose window
// cannot be had (its upstream down, or answering a window that ends
// before it starts) is logged the first time, then at most once an
// interval with the requests it speaks for: one warn line per request
// would let a single client fill the operator's log.
func TestASignersMissingRenewalWindowIsLoggedOnceAnIntervalNotOncePerRequest(t *testing.T) {
	ctx := context.Background()
	backwards := signer.RenewalInfo{Start: time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC), End: time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)}
	cases := []struct {
		name  string
		info  signer.RenewalInfo
		err   error
		event string
	}{
		{"ok/a failing signer", signer.RenewalInfo{}, errors.New("upstream down"), "renewal_info_failed"},
		{"ok/a signer's window that ends before it starts", backwards, nil, "renewal_info_invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			fake := clocktest.New(time.Now())
			e := newTestEnvWith(t, envOptions{
				wrap: func(s *localca.Signer) signer.Signer { return &windowSigner{Signer: s, info: tc.info, err: tc.err} },
				opts: func(o *Options) { o.Logger = zap.New(core); o.Clock = fake },
			})
			crt := e.issue(ctx, e.client(ctx), "polled.example.com")
			const burst = 20
			for i := range burst {
				if r := e.renewalInfo(certIDOf(crt.leaf)); r.status != http.StatusOK {
					t.Fatalf("renewal-info %d: %d %s; want the computed window", i, r.status, r.body)
				}
			}
			lines := logs.FilterField(zap.String("event", tc.event)).All()
			if len(lines) != 1 {
				t.Fatalf("%d %s lines for %d requests; want 1", len(lines), tc.event, burst)
			}
			fake.Advance(authority.RenewalLogEvery + time.Second)
			if r := e.renewalInfo(certIDOf(crt.leaf)); r.status != http.StatusOK {
				t.Fatalf("renewal-info after the interval: %d %s", r.status, r.body)
			}
			lines = logs.FilterField(zap.String("event", tc.event)).All()
			if len(lines) != 2 {
				t.Fatalf("%d %s lines after the interval; want 2", len(lines), tc.event)
			}
			if got := lines[1].ContextMap()["requests"]; got != int64(burst) {
				t.Errorf("the second line speaks for %v requests; want %d", got, burst)
			}
		})
	}
}
