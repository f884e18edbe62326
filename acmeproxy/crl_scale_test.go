package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"path"
	"sync"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// seedLeaves stores n issued orders of one new account, each with a leaf
// the test CA signed, and returns them with their leaves.
func (e *testEnv) seedLeaves(ctx context.Context, n int) ([]store.Order, []*x509.Certificate) {
	e.t.Helper()
	serials := make([]*big.Int, n)
	for i := range serials {
		serial := make([]byte, 16)
		_, _ = rand.Read(serial)
		serial[0] &= 0x7f
		serials[i] = new(big.Int).SetBytes(serial)
	}
	return e.seedLeavesAt(ctx, time.Now(), serials)
}

// seedLeavesAt is seedLeaves for leaves with the given serials, valid
// from a minute before now for 12 hours.
func (e *testEnv) seedLeavesAt(ctx context.Context, now time.Time, serials []*big.Int) ([]store.Order, []*x509.Certificate) {
	e.t.Helper()
	c := e.client(ctx)
	accountID := path.Base(string(c.KID))
	iss, err := e.ca.src(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	spki, _ := x509.MarshalPKIXPublicKey(key.Public())
	seeds := make([]store.SeededOrder, len(serials))
	leaves := make([]*x509.Certificate, len(serials))
	for i := range seeds {
		name := fmt.Sprintf("burst-%d.example.com", i)
		tmpl := &x509.Certificate{SerialNumber: serials[i], Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(12 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, iss.Chain[0], key.Public(), iss.Key)
		if err != nil {
			e.t.Fatal(err)
		}
		leaves[i], _ = x509.ParseCertificate(der)
		seeds[i] = store.SeededOrder{Profile: e.srv.Profile(), AccountID: accountID,
			Identifiers: []vocab.Identifier{{Type: vocab.IdentifierDNS, Value: name}},
			Challenges:  []string{vocab.ChallengeHTTP01, vocab.ChallengeDNS01}, Created: now,
			Certificate: store.Certificate{Serial: hex.EncodeToString(leaves[i].SerialNumber.Bytes()),
				ChainPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
				PublicKey: spki, NotBefore: leaves[i].NotBefore, NotAfter: leaves[i].NotAfter}}
	}
	orders, err := e.db.SeedIssued(ctx, seeds)
	if err != nil {
		e.t.Fatal(err)
	}
	return orders, leaves
}

// A mass revocation is when the CA matters most: a thousand revocations
// at once must not cost a thousand regenerations of a CRL that grows with
// each, and every one of them must still reach the CRL soon after.
func TestABurstOfRevocationsSharesAFewCRLRegenerationsAndEveryOneIsListed(t *testing.T) {
	const burst = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A runner that looks for due jobs often, so that nothing but the
	// coalescing spaces the regenerations out.
	e := newTestEnvWith(t, envOptions{runner: jobs.RunnerOptions{PollInterval: 20 * time.Millisecond}})
	before := e.crl(func(*x509.RevocationList) bool { return true })
	orders, leaves := e.seedLeaves(ctx, burst)

	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, burst)
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for i := range work {
				reason := 4 // superseded
				if _, err := e.srv.Authority().RevokeOrder(ctx, orders[i].ID, &reason,
					authority.Actor{Kind: authority.ActorAdmin, ID: "test"}); err != nil {
					errs <- fmt.Errorf("revoking order %d: %w", i, err)
				}
			}
		})
	}
	for i := range orders {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	revoked := time.Now()
	serials := make([]*big.Int, burst)
	for i, l := range leaves {
		serials[i] = l.SerialNumber
	}
	after := e.crl(lists(serials...))
	listed := time.Now()

	regenerations := new(big.Int).Sub(after.Number, before.Number).Int64()
	// Regenerations begin at least CRLCoalesce apart: one as the burst
	// begins, one per CRLCoalesce of it, and the last, which lists what
	// arrived during the one before it; one more for timers that fire a
	// millisecond early.
	bound := int64(revoked.Sub(start)/authority.CRLCoalesce) + 3
	t.Logf("%d revocations in %v caused %d CRL regenerations (bound %d); all listed %v after the last",
		burst, revoked.Sub(start).Round(time.Millisecond), regenerations, bound, listed.Sub(revoked).Round(time.Millisecond))
	if regenerations < 1 || regenerations > bound {
		t.Errorf("%d revocations caused %d CRL regenerations; want between 1 and %d", burst, regenerations, bound)
	}
	// The stated delay is CRLCoalesce and two builds (a few milliseconds
	// each here); the margin is for a loaded test machine.
	if d := listed.Sub(revoked); d > authority.CRLCoalesce+4*time.Second {
		t.Errorf("the last revocations reached the served CRL %v after they were recorded; want within about %v", d, authority.CRLCoalesce)
	}
	if len(after.RevokedCertificateEntries) != burst {
		t.Errorf("the CRL lists %d entries; want the %d revoked", len(after.RevokedCertificateEntries), burst)
	}
}

// A CRL of 100,000 entries is 5 MB; clients and caches polling it should
// get 304 Not Modified for the one they hold, and the new one once it
// changes.
func TestTheCRLAnswersAConditionalRequestForTheOneAClientHoldsWith304(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, nil)
	first := e.crl(func(*x509.RevocationList) bool { return true })
	get := func(header, value string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.url("/crl"), nil)
		if header != "" {
			req.Header.Set(header, value)
		}
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	resp, body := get("", "")
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if resp.StatusCode != http.StatusOK || etag == "" || lastMod == "" {
		t.Fatalf("GET crl: %d, ETag %q, Last-Modified %q; want 200 with both", resp.StatusCode, etag, lastMod)
	}
	if lm, err := http.ParseTime(lastMod); err != nil || !lm.Equal(first.ThisUpdate) {
		t.Errorf("Last-Modified %q; want the thisUpdate %v", lastMod, first.ThisUpdate)
	}
	if crl, err := x509.ParseRevocationList(body); err != nil || crl.Number.Cmp(first.Number) != 0 {
		t.Fatalf("the CRL served: %v", err)
	}
	for _, c := range []struct{ name, header, value string }{
		{"ok/If-None-Match with the CRL's ETag", "If-None-Match", etag},
		{"ok/If-Modified-Since its Last-Modified", "If-Modified-Since", lastMod},
	} {
		resp, body := get(c.header, c.value)
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Errorf("%s: %d with %d bytes; want 304 without a body", c.name, resp.StatusCode, len(body))
		}
	}

	// A revocation makes a new CRL: the old ETag no longer matches.
	c := e.client(ctx)
	cert := e.issue(ctx, c, "conditional.example.com")
	if err := c.RevokeCert(ctx, nil, cert.leaf.Raw, 0); err != nil {
		t.Fatal(err)
	}
	e.crl(lists(cert.leaf.SerialNumber))
	resp, body = get("If-None-Match", etag)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == etag {
		t.Fatalf("after a revocation, If-None-Match with the old ETag: %d, ETag %q; want 200 and a new ETag", resp.StatusCode, resp.Header.Get("ETag"))
	}
	if crl, err := x509.ParseRevocationList(body); err != nil {
		t.Fatalf("the new CRL: %v", err)
	} else if _, ok := entry(crl, cert.leaf.SerialNumber); !ok {
		t.Error("the CRL served for an outdated ETag does not list the revocation")
	}
}
