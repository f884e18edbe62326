package caddyacmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"golang.org/x/crypto/acme"
)

// A revocation through a relay profile is carried to the upstream by a
// signer_revoke job, which the request waits for (acmeproxy.Options.
// RevokeWait, 10 s by default): a real client revoking a certificate
// while the upstream answers quickly is answered with success — not the
// 503 "queued, retry to confirm" it would take for a failed revocation —
// and the upstream has revoked it. The same account asking again is
// answered with success too; anyone else (the certificate's own key) is
// told it is alreadyRevoked (RFC 8555 §7.6), as the local CA answers a
// second revocation.
func TestARealClientsRevocationThroughTheRelayIsAnsweredOnceTheUpstreamRevoked(t *testing.T) {
	tests := []struct {
		name string
		// issueAndRevoke issues a certificate for name through p as a
		// client of its own, revokes it twice with that client (the
		// second answer in again), and returns its leaf and key.
		issueAndRevoke func(t *testing.T, ctx context.Context, b *relayBench, p *relayProcess, name string) (leaf *x509.Certificate, key *ecdsa.PrivateKey, first, again error)
	}{
		{"lego", func(t *testing.T, ctx context.Context, b *relayBench, p *relayProcess, name string) (*x509.Certificate, *ecdsa.PrivateKey, error, error) {
			lc := newRelayLego(t, ctx, p.dirURL, p.ts.Client(), b.dns)
			res, err := lc.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{name}, Bundle: true, KeyType: certcrypto.EC256})
			if err != nil {
				t.Fatalf("lego Obtain: %v", err)
			}
			keyBlock, _ := pem.Decode(res.PrivateKey)
			k, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			key, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				t.Fatalf("lego's key is a %T; want ECDSA", k)
			}
			first := lc.Certificate.Revoke(ctx, res.Certificate)
			return relayLeaf(t, res), key, first, lc.Certificate.Revoke(ctx, res.Certificate)
		}},
		{"x/crypto/acme", func(t *testing.T, ctx context.Context, b *relayBench, p *relayProcess, name string) (*x509.Certificate, *ecdsa.PrivateKey, error, error) {
			c := p.client(t, ctx)
			o := b.readyOrder(t, ctx, c, name)
			csr, key := relayCSRAndKey(t, name)
			ders, _, err := c.CreateOrderCert(ctx, o.FinalizeURL, csr, true)
			if err != nil {
				t.Fatalf("finalize: %v", err)
			}
			leaf, err := x509.ParseCertificate(ders[0])
			if err != nil {
				t.Fatal(err)
			}
			// x/crypto/acme asks again on a 503 until its context ends:
			// a short one makes a 503 its error.
			revoke := func() error {
				rctx, cancel := context.WithTimeout(ctx, 12*time.Second)
				defer cancel()
				return c.RevokeCert(rctx, nil, ders[0], acme.CRLReasonKeyCompromise)
			}
			first := revoke()
			return leaf, key, first, revoke()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			b := newRelayBench(t) // the default RevokeWait
			p := b.start()
			leaf, key, first, again := tt.issueAndRevoke(t, ctx, b, p, "client-revokes.example.com")
			if first != nil {
				t.Fatalf("the revocation: %v; want success", first)
			}
			if b.pebble.store.GetRevokedCertificateBySerial(leaf.SerialNumber) == nil {
				t.Error("Pebble does not report the certificate revoked")
			}
			if again != nil {
				t.Errorf("the same account revoking again: %v; want success", again)
			}
			// Another requester, the certificate's own key, by hand:
			// x/crypto/acme takes alreadyRevoked for success.
			if status, _, body := relayRevokeByKey(t, p, key, leaf.Raw, 1); status != http.StatusBadRequest ||
				!strings.Contains(body, "urn:ietf:params:acme:error:alreadyRevoked") {
				t.Errorf("the certificate's key revoking it after the account: %d %s; want 400 alreadyRevoked", status, body)
			}
		})
	}
}
