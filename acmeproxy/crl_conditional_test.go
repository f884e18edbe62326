package acmeproxy

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A client that revalidates the CRL with If-Modified-Since alone (curl
// -z, a cache that keeps only Last-Modified) is told 304 whenever the
// CRL's Last-Modified — its thisUpdate, to the second — is not after the
// date it sends. A CRL rebuilt by another instance in the second of the
// one the client holds would be the same date, and the client would keep
// a CRL without the revocation: the rebuild waits for the next second.
func TestARevocationAtAnotherInstanceInTheSecondOfTheHeldCRLIsNotAnswered304(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Two tenths into a second, so that half a second later is the
		// same second.
		clk := clocktest.New(time.Now().Truncate(time.Second).Add(200 * time.Millisecond))
		a, b := twoInstances(t, clk)

		held, err := a.srv.Authority().RegenerateCRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		get := func(e *testEnv, ims string) (*http.Response, []byte) {
			t.Helper()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url("/crl"), nil)
			if ims != "" {
				req.Header.Set("If-Modified-Since", ims)
			}
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp, body
		}
		resp, _ := get(a, "")
		lastMod := resp.Header.Get("Last-Modified")
		if resp.StatusCode != http.StatusOK || lastMod == "" {
			t.Fatalf("GET crl: %d, Last-Modified %q; want 200 with one", resp.StatusCode, lastMod)
		}

		// Half a second later, in the same second, b records a
		// revocation; b has built no CRL, so its regeneration is due at
		// once, on whichever instance's runner takes it.
		clk.Advance(500 * time.Millisecond)
		orders, leaves := b.seedLeaves(ctx, 1)
		if _, err := b.srv.Authority().RevokeOrder(ctx, orders[0].ID, nil, authority.Actor{Kind: authority.ActorAdmin, ID: "test"}); err != nil {
			t.Fatal(err)
		}
		keyID := signer.CAKeyID(mustIssuerCA(t, a))
		rebuiltOrTried := func() bool {
			if c, err := a.db.GetCRLInfo(ctx, keyID); err == nil && c.Number > held.Number {
				return true
			}
			js, err := a.queue.List(ctx, store.JobFilter{Kind: authority.CRLRegenerateKind, Status: store.JobReady})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range js {
				if j.LastError != "" {
					return true
				}
			}
			return false
		}
		waitFor(t, ctx, "the regeneration to run", rebuiltOrTried)
		clk.Advance(time.Second)
		waitFor(t, ctx, "the CRL to be rebuilt", func() bool {
			c, err := a.db.GetCRLInfo(ctx, keyID)
			return err == nil && c.Number > held.Number
		})
		// Past the few seconds an instance serves its CRL from memory
		// before it asks the store for a newer one.
		clk.Advance(10 * time.Second)

		resp, body := get(a, lastMod)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("If-Modified-Since %s, the Last-Modified of CRL %d, after a revocation: %d (Last-Modified now %q); want 200 and the new CRL",
				lastMod, held.Number, resp.StatusCode, resp.Header.Get("Last-Modified"))
		}
		crl, err := x509.ParseRevocationList(body)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := entry(crl, leaves[0].SerialNumber); !ok {
			t.Errorf("CRL %d served for an If-Modified-Since of CRL %d does not list the revocation", crl.Number, held.Number)
		}
	})
}

// mustIssuerCA is the CA e's profile issues from now.
func mustIssuerCA(t *testing.T, e *testEnv) *x509.Certificate {
	t.Helper()
	iss, err := e.ca.src(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return iss.Chain[0]
}

// waitFor polls cond until it holds, failing the test at ctx's end.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// An operator's `crl regenerate` in the second of the stored CRL (one a
// job, another instance or an earlier regenerate just published) waits,
// as a crl_regenerate job does, for the next second: built at once, its
// CRL would have the Last-Modified of the stored one, and a client
// revalidating with If-Modified-Since alone would be told 304 and keep
// the CRL without what the new one changed.
func TestAnOperatorsCRLRegenerationInTheSecondOfTheStoredCRLWaitsForTheNextSecond(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Two tenths into a second, so that half a second later is the
		// same second.
		clk := clocktest.New(time.Now().Truncate(time.Second).Add(200 * time.Millisecond))
		e := newTestEnvWith(t, envOptions{opts: func(o *Options) { o.Clock = clk }})
		stored, err := e.srv.Authority().RegenerateCRL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(500 * time.Millisecond)

		op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}, Clock: clk}
		type result struct {
			v   operator.CRLView
			err error
		}
		done := make(chan result, 1)
		go func() {
			v, err := op.RegenerateCRL(ctx, e.srv.Profile(), authority.Actor{Kind: authority.ActorCLI, ID: "alice"})
			done <- result{v, err}
		}()
		timer := make(chan time.Time, 1)
		go func() {
			if at, err := clk.NextTimer(ctx); err == nil {
				timer <- at
			}
		}()
		next := stored.ThisUpdate.Add(time.Second)
		var got result
		select {
		case got = <-done:
			t.Errorf("the regeneration answered at once, in the second of CRL %d", stored.Number)
		case at := <-timer:
			if !at.Equal(next) {
				t.Errorf("the regeneration waits until %s; want the next second, %s", at, next)
			}
			clk.Set(at)
			got = <-done
		}
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.v.Number <= stored.Number || !got.v.ThisUpdate.After(stored.ThisUpdate) {
			t.Errorf("the regeneration published CRL %d with thisUpdate %s after CRL %d of %s; want a later number in a later second",
				got.v.Number, got.v.ThisUpdate, stored.Number, stored.ThisUpdate)
		}
	})
}

// Two regenerations that run side by side in one second — a job at one
// instance, an operator's at another — store CRLs of two seconds: the one
// that finds the other's CRL stored when it comes to store its own (its
// cRLNumber taken) reads the ledger again and, finding that CRL of its own
// second, waits for the next. Built in the same second, the two CRLs
// would share a Last-Modified, and a client holding the first would be
// told 304 for the second and what it adds.
func TestTwoRegenerationsRacingInOneSecondStoreCRLsOfTwoSeconds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		clk := clocktest.New(time.Now().Truncate(time.Second).Add(200 * time.Millisecond))
		withClock := func(o *Options) { o.Clock = clk }
		gate := &crlSignGate{entered: make(chan struct{}), release: make(chan struct{})}
		place := newPlace(t)
		a := newTestEnvWith(t, envOptions{dbPath: place, opts: withClock,
			wrap: func(s *localca.Signer) signer.Signer { gate.Signer = s; return gate }})
		b := newTestEnvWith(t, envOptions{dbPath: place, ca: a.ca, opts: withClock})

		type result struct {
			crl store.CRL
			err error
		}
		regenerate := func(ctx context.Context, e *testEnv) <-chan result {
			out := make(chan result, 1)
			go func() {
				crl, err := e.srv.Authority().RegenerateCRLAfterStored(ctx, authority.Actor{Kind: authority.ActorAdmin, ID: "alice"})
				out <- result{crl, err}
			}()
			return out
		}
		// awaitMovingTheClock waits for a regeneration, moving the clock
		// on meanwhile: it may wait for the next second.
		awaitMovingTheClock := func(who string, ch <-chan result) store.CRL {
			t.Helper()
			for {
				select {
				case r := <-ch:
					if r.err != nil {
						t.Fatalf("%s's regeneration: %v", who, r.err)
					}
					return r.crl
				case <-time.After(20 * time.Millisecond):
					clk.Advance(100 * time.Millisecond)
				case <-ctx.Done():
					t.Fatalf("%s's regeneration never returned", who)
				}
			}
		}

		// The instances' start publishes a first CRL; the race is in the
		// second after it.
		awaitMovingTheClock("b", regenerate(ctx, b))
		clk.Set(clk.Now().Truncate(time.Second).Add(time.Second + 200*time.Millisecond))

		atA := regenerate(context.WithValue(ctx, crlSignGateKey{}, true), a)
		select {
		case <-gate.entered: // a has read the ledger and is signing
		case <-ctx.Done():
			t.Fatal("a's regeneration never came to sign its CRL")
		}
		atB := awaitMovingTheClock("b", regenerate(ctx, b))
		close(gate.release)
		got := awaitMovingTheClock("a", atA)
		if got.Number <= atB.Number || !got.ThisUpdate.After(atB.ThisUpdate) {
			t.Errorf("a stored CRL %d of %s after b's CRL %d of %s; want a later number in a later second",
				got.Number, got.ThisUpdate.Format(time.RFC3339), atB.Number, atB.ThisUpdate.Format(time.RFC3339))
		}
	})
}

// crlSignGate is a local CA whose CRL signatures for a context carrying
// crlSignGateKey wait: the first closes entered, and each signs once
// release is closed. Others (the job runners') sign at once.
type crlSignGate struct {
	*localca.Signer
	once             sync.Once
	entered, release chan struct{}
}

type crlSignGateKey struct{}

func (g *crlSignGate) wait(ctx context.Context) {
	if ctx.Value(crlSignGateKey{}) == nil {
		return
	}
	g.once.Do(func() { close(g.entered) })
	<-g.release
}

func (g *crlSignGate) SignCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList) ([]byte, error) {
	g.wait(ctx)
	return g.Signer.SignCRL(ctx, issuerKeyID, tmpl)
}

func (g *crlSignGate) SignEncodedCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList, entries [][]byte) ([]byte, error) {
	g.wait(ctx)
	return g.Signer.SignEncodedCRL(ctx, issuerKeyID, tmpl, entries)
}
