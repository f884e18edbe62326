// Package signertest makes what the tests of the signers that work from
// the store (relay, script) start from: an order as finalize hands it to
// a signer. Like net/http/httptest it exists only for tests: production
// code must not import it.
package signertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Finalized stores, at now, an order for name in profile "p" whose one
// dns-01 authorization is valid, runs beforeClaim (when set) with the
// order's ID once it is ready, and claims it for issue with a fresh CSR
// as finalize does. It returns the request a signer bound to "p" gets for
// the order and the CSR's key. Both signers' tests build their orders
// this one way, so they exercise the same hand-over.
func Finalized(t testing.TB, db *store.DB, now time.Time, name string, beforeClaim func(orderID string)) (signer.IssueRequest, *ecdsa.PrivateKey) {
	t.Helper()
	ctx := context.Background()
	acct, _, err := db.CreateAccount(ctx, store.Account{Profile: "p", Thumbprint: store.NewID(), KeyJWK: []byte(`{}`)}, now)
	if err != nil {
		t.Fatal(err)
	}
	id := acme.Identifier{Type: "dns", Value: name}
	o, err := db.CreateOrder(ctx, store.Order{Profile: "p", AccountID: acct.ID, Identifiers: []acme.Identifier{id}, Expires: now.Add(time.Hour)},
		[]store.Authz{{Identifier: id, Expires: now.Add(time.Hour), Challenges: []store.Challenge{{Type: "dns-01", Token: store.NewID()}}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	a, err := db.GetAuthz(ctx, "p", o.AuthzIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.StartChallenge(ctx, a.Challenges[0].ID, now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteChallenge(ctx, a.Challenges[0].ID, true, nil, now); err != nil {
		t.Fatal(err)
	}
	if beforeClaim != nil {
		beforeClaim(o.ID)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}}, key)
	if err != nil {
		t.Fatal(err)
	}
	if won, err := db.ClaimOrderForIssue(ctx, o.ID, der, store.OrderClient{}, "", now); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return signer.IssueRequest{OrderID: o.ID, Profile: "p", CSR: csr, CSRDER: der,
		Identifiers: []acme.Identifier{id}, ClientAddr: "10.1.2.3", UserAgent: "test-client"}, key
}
