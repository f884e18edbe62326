package acmeproxy

import (
	"context"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// twoInstances are two instances on one new database and one CA, as two
// Caddy processes of a fleet are, on the clock clk.
func twoInstances(t *testing.T, clk *clocktest.Fake) (a, b *testEnv) {
	t.Helper()
	withClock := func(o *Options) { o.Clock = clk }
	place := newPlace(t)
	a = newTestEnvWith(t, envOptions{dbPath: place, opts: withClock})
	b = newTestEnvWith(t, envOptions{dbPath: place, ca: a.ca, opts: withClock})
	return a, b
}

// An instance serves a CRL from memory and asks the store for a newer one
// every few seconds: a revocation recorded at another instance is on the
// CRL it serves within 5 s of the CRL that lists it being stored, as the
// README says.
func TestARevocationAtOneInstanceIsOnTheCRLAnotherServesWithinFiveSeconds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		clk := clocktest.New(time.Now())
		a, b := twoInstances(t, clk)
		served := func() *x509.RevocationList {
			t.Helper()
			resp, err := b.ts.Client().Get(b.url("/crl"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			der, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET crl at b: %d %s", resp.StatusCode, der)
			}
			crl, err := x509.ParseRevocationList(der)
			if err != nil {
				t.Fatal(err)
			}
			return crl
		}
		if _, err := a.srv.Authority().RegenerateCRL(ctx); err != nil {
			t.Fatal(err)
		}
		served() // b keeps it in memory, and asks the store again 5 s later

		clk.Advance(time.Second) // a regeneration waits for a later second than the stored CRL's
		orders, leaves := a.seedLeaves(ctx, 1)
		if _, err := a.srv.Authority().RevokeOrder(ctx, orders[0].ID, nil, authority.Actor{Kind: authority.ActorAdmin, ID: "test"}); err != nil {
			t.Fatal(err)
		}
		keyID := signer.CAKeyID(mustIssuerCA(t, a))
		waitFor(t, ctx, "the CRL listing the revocation to be stored", func() bool {
			c, err := a.db.GetCRL(ctx, keyID)
			if err != nil {
				return false
			}
			crl, err := x509.ParseRevocationList(c.DER)
			if err != nil {
				t.Fatal(err)
			}
			_, ok := entry(crl, leaves[0].SerialNumber)
			return ok
		})
		clk.Advance(4 * time.Second) // 5 s after b last asked the store
		if _, ok := entry(served(), leaves[0].SerialNumber); !ok {
			t.Errorf("5 s after a stored the CRL listing its revocation, b serves one without it")
		}
	})
}
