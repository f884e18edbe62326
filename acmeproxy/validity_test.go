package acmeproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

// RFC 8555 §7.4: a server MUST NOT issue a certificate with contents other
// than those requested. The leaf of an order that asked for notBefore and
// notAfter is valid exactly from the one to the other.
func TestTheLeafOfAnOrderThatAskedForDatesIsValidForExactlyThoseDates(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		e := newTestEnv(t, nil)
		ctx := t.Context()
		c := e.client(ctx)
		now := time.Now().UTC().Truncate(time.Second)
		tests := []struct {
			name   string
			nb, na time.Time
		}{
			{"an hour ahead, for twelve hours", now.Add(time.Hour), now.Add(13 * time.Hour)},
			{"from now, for the test CA's whole day", now, now.Add(24*time.Hour - time.Second)},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				o, err := c.AuthorizeOrder(ctx, acme.DomainIDs("dates.example.com"),
					acme.WithOrderNotBefore(tc.nb), acme.WithOrderNotAfter(tc.na))
				if err != nil {
					t.Fatalf("new order: %v", err)
				}
				o = e.authorize(ctx, c, o)
				key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				chain, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, newCSR(t, key, "dates.example.com", []string{"dates.example.com"}, nil), true)
				if err != nil {
					t.Fatalf("finalize: %v", err)
				}
				leaf, err := x509.ParseCertificate(chain[0])
				if err != nil {
					t.Fatal(err)
				}
				if !leaf.NotBefore.Equal(tc.nb) || !leaf.NotAfter.Equal(tc.na) {
					t.Errorf("the leaf is valid from %v to %v; the order asked for %v to %v", leaf.NotBefore, leaf.NotAfter, tc.nb, tc.na)
				}
			})
		}
	})
}
