package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
)

// duplicateCertificatesLong is the period of these tests' limit of two
// certificates per account and identifier set: nothing refills while a
// test runs.
const duplicateCertificatesLong = 1000 * 24 * time.Hour

// duplicate_certificates counts certificates, as its name says: orders
// for the set that never get one — left pending, failed validation — do
// not count, however many there are.
func TestOrdersThatNeverGetACertificateDoNotCountAsDuplicateCertificates(t *testing.T) {
	e, _, m := limitEnv(t, func(l *LimitsConfig) { l.DuplicateCertificates = rate(2, duplicateCertificatesLong) })
	c := e.rawClient()
	c.register()
	set := []map[string]string{dnsID("a.example.com"), dnsID("b.example.com")}
	// Abandoned: left pending.
	c.order(set...)
	c.order(set...)
	// Failed: its validation fails, the order is invalid.
	failed := c.order(set...)
	c.answerHTTP01(failed.Authorizations[0], "a wrong answer")
	c.await(failed.Authorizations[0], "invalid")
	c.await(failed.url, "invalid")

	if r := c.post(e.url("/new-order"), map[string]any{"identifiers": set}, jwsOpts{}); r.status != http.StatusCreated {
		t.Fatalf("a new-order after 3 orders of the set without a certificate, the limit 2 certificates: %d %s; want 201", r.status, r.body)
	}
	if n := m.count(authority.LimitDuplicateCertificates); n != 0 {
		t.Errorf("%d refusals by duplicate_certificates counted; want none", n)
	}
}

// Once the account has the limit's certificates for one exact set, the
// next new-order for that set (in any order and case) is refused with
// 429 rateLimited naming duplicate_certificates and a Retry-After of at
// most the refill; a subset, another account's order of the set and the
// orders still unfinalized are not affected, and an order created before
// the limit was met still gets its certificate. Both dialects: the unit
// is spent by the issuance's write.
func TestTheLimitsCertificatesForASetRefuseTheNextNewOrderForIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e, _, m := limitEnv(t, func(l *LimitsConfig) { l.DuplicateCertificates = rate(2, duplicateCertificatesLong) })
		ctx := context.Background()
		c := e.client(ctx)
		alice := e.raw(c)
		// Created while the bucket is full; finalized after the limit's
		// certificates: a certificate is never refused for the limit.
		late := alice.readyOrder("a.example.com", "b.example.com")
		e.issue(ctx, c, "a.example.com", "b.example.com")
		e.issue(ctx, c, "b.example.com", "a.example.com")

		set := []map[string]string{dnsID("B.example.com"), dnsID("a.example.com")}
		r := alice.post(e.url("/new-order"), map[string]any{"identifiers": set}, jwsOpts{})
		wantRateLimited(t, r, authority.LimitDuplicateCertificates, duplicateCertificatesLong/2)
		if got := m.count(authority.LimitDuplicateCertificates); got != 1 {
			t.Errorf("metrics counted %d refusals by duplicate_certificates; want 1", got)
		}
		if r := alice.finalize(late, newCSR(t, newKey(t), "", []string{"a.example.com", "b.example.com"}, nil)); r.status != http.StatusOK ||
			decodeAs[orderJSON](t, r).Status != "valid" {
			t.Fatalf("finalize of an order created before the limit was met: %d %s; want its certificate", r.status, r.body)
		}
		alice.order(dnsID("a.example.com")) // a subset is another set
		bob := e.rawClient()
		bob.register()
		bob.order(set...) // another account's bucket is its own
	})
}

// A signer that finishes later (the relay, a script, a delegated
// signer: each reports through the Settler) spends the unit when it
// reports the certificate, not at finalize: until then the set's
// new-orders are accepted.
func TestACertificateASignerSettlesLaterCountsWhenItIsRecorded(t *testing.T) {
	var local *localca.Signer
	later := &laterSigner{sjSigner: &sjSigner{}}
	e, _, _ := limitEnv(t, func(l *LimitsConfig) { l.DuplicateCertificates = rate(1, duplicateCertificatesLong) },
		func(eo *envOptions) {
			eo.wrap = func(s *localca.Signer) signer.Signer { local = s; return later }
		})
	ctx := context.Background()
	c := e.rawClient()
	c.register()
	const name = "later.example.com"
	o := c.readyOrder(name)
	if r := c.finalize(o, newCSR(t, newKey(t), "", []string{name}, nil)); r.status != http.StatusOK || decodeAs[orderJSON](t, r).Status != "processing" {
		t.Fatalf("finalize: %d %s; want the order processing", r.status, r.body)
	}
	c.order(dnsID(name)) // no certificate yet: not counted
	later.mu.Lock()
	req := later.reqs[len(later.reqs)-1]
	later.mu.Unlock()
	out, err := local.Issue(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Authority().Issued(ctx, path.Base(o.url), out.Chain); err != nil {
		t.Fatal(err)
	}
	r := c.post(e.url("/new-order"), map[string]any{"identifiers": []map[string]string{dnsID(name)}}, jwsOpts{})
	wantRateLimited(t, r, authority.LimitDuplicateCertificates, duplicateCertificatesLong)
}
