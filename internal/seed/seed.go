// Package seed fills a store with a realistic history — accounts, issued
// orders with their identifiers, authorizations, challenges and
// certificates, and optionally revocations — through the store's bulk
// writes, so that benchmarks can measure a server whose database is
// large. It is used by `go run ./bench/seed` and by the benchmarks in
// bench/; nothing in a server imports it.
package seed

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Options say what to write. Zero values are the defaults.
type Options struct {
	Profile string // required
	Orders  int    // issued orders to write
	// OrdersPerAccount is how many orders share an account (default 10).
	OrdersPerAccount int
	// Revoked is how many of the orders' certificates are revoked, spread
	// evenly over them, listed on the CRL of IssuerKeyID.
	Revoked     int
	IssuerKeyID string
	// Zone is the DNS zone the names lie under (default seed.example.com).
	// Each name is ordered three times (renewals); one order in ten has
	// three names.
	Zone string
	// Now is when the history ends (default: the wall clock); orders are
	// spread over the 90 days before it, their certificates valid for 120
	// days from their order, so all of them are unexpired at Now.
	Now time.Time
	// Batch is how many orders one write holds (default 5000).
	Batch int
	// Progress, if set, is called after each batch with the orders
	// written so far.
	Progress func(done int)
}

// Sample names rows the seeding wrote, for queries that find them.
type Sample struct {
	Identifier string // a name ordered three times
	AccountID  string // an account with OrdersPerAccount orders
	Serial     string // a certificate's serial
	OrderID    string
}

// Run writes what o says into db and returns a sample of it.
func Run(ctx context.Context, db *store.DB, o Options) (Sample, error) {
	if o.Profile == "" {
		return Sample{}, errors.New("seed: a profile is required")
	}
	if o.Revoked > 0 && o.IssuerKeyID == "" {
		return Sample{}, errors.New("seed: revocations need the issuer's key id")
	}
	if o.Revoked > o.Orders {
		return Sample{}, fmt.Errorf("seed: %d revocations of %d orders", o.Revoked, o.Orders)
	}
	if o.OrdersPerAccount <= 0 {
		o.OrdersPerAccount = 10
	}
	if o.Zone == "" {
		o.Zone = "seed.example.com"
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Batch <= 0 {
		o.Batch = 5000
	}
	chain, spki, err := sampleChain()
	if err != nil {
		return Sample{}, err
	}
	run := make([]byte, 4)
	_, _ = rand.Read(run)
	runID := hex.EncodeToString(run) // names and accounts of this run are its own
	const span = 90 * 24 * time.Hour
	start := o.Now.Add(-span)
	var (
		sample   Sample
		accounts []store.Account
		account  string
	)
	for done := 0; done < o.Orders; {
		n := min(o.Batch, o.Orders-done)
		orders := make([]store.SeededOrder, 0, n)
		accounts = accounts[:0]
		for i := done; i < done+n; i++ {
			if i%o.OrdersPerAccount == 0 {
				account = store.NewID()
				accounts = append(accounts, store.Account{ID: account, Profile: o.Profile,
					Thumbprint: base64.RawURLEncoding.EncodeToString([]byte(store.NewID())),
					KeyJWK:     []byte(`{"crv":"P-256","kty":"EC","x":"` + runID + account + `","y":"seeded"}`),
					Contact:    []string{"mailto:ops-" + runID + "@" + o.Zone}})
			}
			names := 1
			if i%10 == 9 {
				names = 3
			}
			var idents []acme.Identifier
			for k := range names {
				idents = append(idents, acme.Identifier{Type: acme.IdentifierDNS,
					Value: fmt.Sprintf("host-%d-%d.%s.%s", i/3, k, runID, o.Zone)})
			}
			created := start.Add(time.Duration(int64(span) / int64(max(o.Orders, 1)) * int64(i)))
			serial := make([]byte, 16)
			_, _ = rand.Read(serial)
			serial[0] &= 0x7f
			orders = append(orders, store.SeededOrder{Profile: o.Profile, AccountID: account, Identifiers: idents,
				Challenges: []string{acme.ChallengeHTTP01, acme.ChallengeDNS01, acme.ChallengeTLSALPN01}, Created: created,
				Certificate: store.Certificate{Serial: new(big.Int).SetBytes(serial).Text(16), ChainPEM: chain, PublicKey: spki,
					NotBefore: created, NotAfter: created.Add(120 * 24 * time.Hour)}})
		}
		if err := db.SeedAccounts(ctx, accounts, o.Now); err != nil {
			return Sample{}, err
		}
		written, err := db.SeedIssued(ctx, orders)
		if err != nil {
			return Sample{}, err
		}
		var revs []store.Revocation
		for j, w := range written {
			i := done + j
			if o.Revoked > 0 && (i*o.Revoked)/o.Orders != ((i+1)*o.Revoked)/o.Orders {
				reason := 4 // superseded
				c := orders[j].Certificate
				revs = append(revs, store.Revocation{CertificateID: w.CertificateID, Profile: o.Profile, OrderID: w.ID,
					Serial: c.Serial, IssuerKeyID: o.IssuerKeyID, Reason: &reason, RevokedAt: w.CreatedAt.Add(time.Hour),
					NotAfter: c.NotAfter, ActorKind: "admin", ActorID: "seed"})
			}
			if i == o.Orders/2 {
				sample = Sample{Identifier: w.Identifiers[0].Value, AccountID: w.AccountID, Serial: orders[j].Certificate.Serial, OrderID: w.ID}
			}
		}
		if len(revs) > 0 {
			if err := db.SeedRevocations(ctx, revs); err != nil {
				return Sample{}, err
			}
		}
		done += n
		if o.Progress != nil {
			o.Progress(done)
		}
	}
	return sample, nil
}

// sampleChain is a leaf and its CA as PEM, of the size a real chain has,
// and the leaf's key: every seeded certificate row carries it (the rows'
// serials are their own; nothing parses a seeded chain for its serial).
func sampleChain() (string, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "seed intermediate"},
		NotBefore: now, NotAfter: now.Add(365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return "", nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: now, NotAfter: now.Add(7 * 24 * time.Hour),
		DNSNames: []string{"host.seed.example.com"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, key.Public(), caKey)
	if err != nil {
		return "", nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", nil, err
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	return string(chain), spki, nil
}
