package caddyacmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/crypto/acme"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// relayRevoke posts revoke-cert for der as c's account, by hand:
// x/crypto/acme retries a 503 until its context ends, and the test wants
// to see the 503.
func relayRevoke(t *testing.T, p *relayProcess, c *acme.Client, der []byte, reason int) (int, http.Header, string) {
	t.Helper()
	return relayRevokeSigned(t, p, jose.SigningKey{Algorithm: jose.ES256, Key: c.Key}, map[jose.HeaderKey]any{"kid": string(c.KID)}, false, der, reason)
}

// relayRevokeByKey is relayRevoke signed by key, its jwk in the request
// (the certificate's own key, RFC 8555 §7.6).
func relayRevokeByKey(t *testing.T, p *relayProcess, key *ecdsa.PrivateKey, der []byte, reason int) (int, http.Header, string) {
	t.Helper()
	return relayRevokeSigned(t, p, jose.SigningKey{Algorithm: jose.ES256, Key: key}, map[jose.HeaderKey]any{}, true, der, reason)
}

func relayRevokeSigned(t *testing.T, p *relayProcess, key jose.SigningKey, headers map[jose.HeaderKey]any, embedJWK bool, der []byte, reason int) (int, http.Header, string) {
	t.Helper()
	hc := p.ts.Client()
	base := strings.TrimSuffix(p.dirURL, "/directory")
	resp, err := hc.Head(base + "/new-nonce")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	url := base + "/revoke-cert"
	headers["nonce"], headers["url"] = resp.Header.Get("Replay-Nonce"), url
	signer, err := jose.NewSigner(key, &jose.SignerOptions{ExtraHeaders: headers, EmbedJWK: embedJWK})
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"certificate": base64.RawURLEncoding.EncodeToString(der), "reason": reason})
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = hc.Post(url, "application/jose+json", strings.NewReader(jws.FullSerialize()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

func TestARelayedCertificateIsRevokedAtTheUpstreamOnceItsJobRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	b := newRelayBench(t)
	p, c, o, ders, leaf := relayRevocable(t, ctx, b, "revoke.example.com")
	orderID := path.Base(o.URI)
	// A second certificate, which an operator revokes.
	o2 := b.readyOrder(t, ctx, c, "operator.example.com")
	ders2, _, err := c.CreateOrderCert(ctx, o2.FinalizeURL, relayCSR(t, "operator.example.com"), true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	leaf2, _ := x509.ParseCertificate(ders2[0])
	op := &operator.Operator{DB: p.db, Queue: p.queue, Profiles: relayProfiles{p.srv.Profile(): p.srv}}
	operator := authority.Actor{Kind: authority.ActorAdmin, ID: "ops"}
	superseded := 4
	upstreamRevoked := func() bool { return b.pebble.store.GetRevokedCertificateBySerial(leaf.SerialNumber) != nil }
	locallyRevoked := func() bool {
		cert, err := p.db.CertificateOfOrder(ctx, orderID)
		if err != nil {
			t.Fatal(err)
		}
		return !cert.RevokedAt.IsZero()
	}
	revokeJobs := func() []store.Job {
		js, err := p.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind})
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	wantQueued := func(when string) {
		t.Helper()
		status, h, body := relayRevoke(t, p, c, ders[0], 1)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "serverInternal") || !strings.Contains(body, "queued") ||
			h.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %s (Retry-After %q); want 503 serverInternal queued, with Retry-After", when, status, body, h.Get("Retry-After"))
		}
	}

	// With the runner stopped the request waits, then says "queued".
	if err := p.runner.Stop(); err != nil {
		t.Fatal(err)
	}
	wantQueued("with the runner stopped")
	if res, err := op.RevokeOrder(ctx, path.Base(o2.URI), &superseded, operator); err != nil || !res.Queued || res.Job == 0 {
		t.Fatalf("the operator's revocation with the runner stopped: %+v %v; want queued", res, err)
	}
	if upstreamRevoked() || locallyRevoked() {
		t.Fatal("revoked before any job ran")
	}

	// A runner runs the job against an unreachable upstream: it retries,
	// and the certificate stays unrevoked; asking again follows the job.
	b.pebble.down.Store(true)
	r, err := jobs.NewRunner(p.queue, p.handlers, p.runnerOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	relayWaitFor(t, 20*time.Second, "two failed revocation attempts", func() bool {
		js := revokeJobs()
		return len(js) == 2 && js[1].Attempts >= 2 && js[1].Status == store.JobReady && js[1].LastError != ""
	})
	if upstreamRevoked() || locallyRevoked() {
		t.Fatal("revoked although the upstream is unreachable")
	}
	wantQueued("while the upstream is unreachable")
	if js := revokeJobs(); len(js) != 2 || js[1].Key != orderID {
		t.Fatalf("signer_revoke jobs %+v; want two, the first keyed by its order", js)
	}

	// The upstream is back: the job revokes there, and asking again
	// confirms.
	b.pebble.down.Store(false)
	relayWaitFor(t, 20*time.Second, "the revocation job to finish", func() bool {
		js := revokeJobs()
		return len(js) == 2 && js[0].Status == store.JobDone && js[1].Status == store.JobDone
	})
	rc := b.pebble.store.GetRevokedCertificateBySerial(leaf.SerialNumber)
	if rc == nil {
		t.Fatal("Pebble does not report the certificate revoked")
	}
	if rc.Reason == nil || *rc.Reason != 1 {
		t.Errorf("Pebble has reason %v; want keyCompromise (1)", rc.Reason)
	}
	if status, _, body := relayRevoke(t, p, c, ders[0], 1); status != http.StatusOK {
		t.Fatalf("asking again once the job ran: %d %s; want 200", status, body)
	}
	if !locallyRevoked() {
		t.Error("the local order is not stamped revoked")
	}
	evs, err := p.db.SearchAudit(ctx, store.AuditFilter{Event: vocab.EventCertificateRevoked, OrderID: orderID})
	if err != nil || len(evs) != 1 || evs[0].ActorKind != authority.ActorAccount || evs[0].ClientIP == "" {
		t.Errorf("audit rows %+v (%v); want one certificate_revoked by the account, with its client", evs, err)
	}
	// The ledger has the revocation, without a CA of ours to publish it.
	cert, err := p.db.CertificateOfOrder(ctx, orderID)
	if err != nil {
		t.Fatal(err)
	}
	if rev, err := p.db.RevocationOf(ctx, cert.ID); err != nil || rev.IssuerKeyID != "" || rev.Reason == nil || *rev.Reason != 1 {
		t.Errorf("ledger row %+v (%v); want reason 1 and no issuer of ours", rev, err)
	}

	// The operator asking again is answered with the revocation; the
	// upstream has it with the operator's reason.
	res, err := op.RevokeOrder(ctx, path.Base(o2.URI), &superseded, operator)
	if err != nil || res.Queued || res.Certificate.RevokedAt.IsZero() {
		t.Errorf("the operator asking again: %+v %v; want revoked", res, err)
	}
	if rc := b.pebble.store.GetRevokedCertificateBySerial(leaf2.SerialNumber); rc == nil || rc.Reason == nil || *rc.Reason != 4 {
		t.Errorf("Pebble's record of the operator's revocation: %+v; want reason superseded (4)", rc)
	}
}

// All lists the process's profiles (operator.ProfileLister).
func (p relayProfiles) All() []*authority.Authority {
	var out []*authority.Authority
	for _, s := range p {
		out = append(out, s.Authority())
	}
	return out
}

// An upstream that answered 429 or 503 with a Retry-After asked the
// relay to wait: a revocation waits too — its signer_revoke job asks the
// upstream again no sooner than it said, rather than at the runner's
// backoff — and so does one queued while another request of the profile
// (an order's relay) is waiting out the upstream's rate limit. The
// client is told when to ask again.
func TestARevocationWaitsOutTheWaitTheUpstreamAskedFor(t *testing.T) {
	const wait = 3 * time.Second
	tests := []struct {
		name string
		// limit makes the upstream ask for the wait, before the
		// revocation (of the certificate the test issued first) is
		// asked for.
		limit func(t *testing.T, ctx context.Context, b *relayBench, c *acme.Client)
		// refusals is how many requests the upstream refuses: acmez,
		// the relay's ACME client, sends a request answered 5xx three
		// times in a row before it returns, whatever its Retry-After.
		refusals int
	}{
		{"the revocation rate-limited", func(t *testing.T, ctx context.Context, b *relayBench, c *acme.Client) {
			b.pebble.refuseNext(pebbleRevoke, 1, http.StatusTooManyRequests, "urn:ietf:params:acme:error:rateLimited", "3")
		}, 1},
		{"the revocation answered unavailable", func(t *testing.T, ctx context.Context, b *relayBench, c *acme.Client) {
			b.pebble.refuseNext(pebbleRevoke, 3, http.StatusServiceUnavailable, "urn:ietf:params:acme:error:serverInternal", "3")
		}, 3},
		{"another order's relay rate-limited", func(t *testing.T, ctx context.Context, b *relayBench, c *acme.Client) {
			b.pebble.refuseNext(pebbleNewOrder, 1, http.StatusTooManyRequests, "urn:ietf:params:acme:error:rateLimited", "3")
			o := b.readyOrder(t, ctx, c, "limited.example.com")
			fctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			_, _, _ = c.CreateOrderCert(fctx, o.FinalizeURL, relayCSR(t, "limited.example.com"), true)
			relayWaitFor(t, 10*time.Second, "the upstream to rate-limit the order's relay", func() bool {
				_, refused := b.pebble.revocationTimes()
				return len(refused) == 1
			})
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			b := newRelayBench(t)
			p, c, _, ders, leaf := relayRevocable(t, ctx, b, "waits.example.com")
			tt.limit(t, ctx, b, c)

			relayRevoke(t, p, c, ders[0], 1)
			relayWaitFor(t, 10*time.Second, "the revocation job's first attempt", func() bool {
				js, err := p.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind})
				_, refused := b.pebble.revocationTimes()
				return err == nil && len(js) == 1 && (js[0].LastError != "" || js[0].Status == store.JobDone) && len(refused) == tt.refusals
			})
			// Asking again follows the job.
			status, h, body := relayRevoke(t, p, c, ders[0], 1)
			if after, _ := strconv.Atoi(h.Get("Retry-After")); status != http.StatusServiceUnavailable || !strings.Contains(body, "queued") || after < 2 {
				t.Errorf("the revocation: %d %s (Retry-After %q); want 503 queued, to be asked again in about %s", status, body, h.Get("Retry-After"), wait)
			}
			relayWaitFor(t, 20*time.Second, "the revocation at the upstream", func() bool {
				return b.pebble.store.GetRevokedCertificateBySerial(leaf.SerialNumber) != nil
			})
			received, refused := b.pebble.revocationTimes()
			if len(refused) != tt.refusals {
				t.Fatalf("the front refused %d requests; want %d", len(refused), tt.refusals)
			}
			last := refused[len(refused)-1]
			asked := 0
			for _, at := range received {
				if !at.After(last) {
					continue // a refused revocation
				}
				asked++
				if early := last.Add(wait - 100*time.Millisecond).Sub(at); early > 0 {
					t.Errorf("the upstream was asked to revoke %s before the end of the %s it asked the relay to wait", early.Round(time.Millisecond), wait)
				}
			}
			if asked != 1 {
				t.Errorf("the upstream was asked to revoke %d times after it asked the relay to wait; want once", asked)
			}
		})
	}
}

// relayRevocable starts a process on b whose revocations wait 300 ms in
// their request, and issues a certificate for name through it to a new
// client: its order, chain (DER) and leaf.
func relayRevocable(t *testing.T, ctx context.Context, b *relayBench, name string) (*relayProcess, *acme.Client, *acme.Order, [][]byte, *x509.Certificate) {
	t.Helper()
	b.revokeWait = 300 * time.Millisecond
	p := b.start()
	c := p.client(t, ctx)
	o := b.readyOrder(t, ctx, c, name)
	ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, relayCSR(t, name), true)
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	leaf, err := x509.ParseCertificate(ders[0])
	if err != nil {
		t.Fatal(err)
	}
	return p, c, o, ders, leaf
}
