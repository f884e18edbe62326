package script

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A serial is unique per issuing CA only: two CAs of one profile (the
// second the first created again, with its serial file reset) both
// issued serial 01. Revoking each certificate tells the program that
// certificate's own order.
func TestRevokeNamesTheOrderOfTheCertificateItIsGivenWhenTwoCAsIssuedItsSerial(t *testing.T) {
	ctx := context.Background()
	in := filepath.Join(t.TempDir(), "stdin.json")
	b := newBench(t, Options{Command: []string{program(t, "cat > "+in)}, Revoke: true})
	now := b.clock.Now()
	type stored struct {
		order string
		leaf  *x509.Certificate
	}
	var certs []stored
	for _, ca := range []*testCA{newTestCA(t), newTestCA(t)} {
		req, key := b.finalized(t, "a.example.com")
		leaf := sign(t, &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			DNSNames: []string{"a.example.com"}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca.inter, key.Public(), ca.interKey)
		o, err := b.db.GetOrder(ctx, "p", req.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.IssueOrder(ctx, store.Certificate{OrderID: req.OrderID, Profile: "p", AccountID: o.AccountID,
			Serial: hex.EncodeToString(leaf.SerialNumber.Bytes()), ChainPEM: string(pemOf(leaf, ca.inter)), PublicKey: leaf.RawSubjectPublicKeyInfo,
			NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, IssuerKeyID: signer.LeafIssuerKeyID(leaf)},
			store.AuditEvent{At: now, Event: "certificate_issued", Outcome: "success"}, now); err != nil {
			t.Fatalf("storing the certificate of order %s: %v", req.OrderID, err)
		}
		certs = append(certs, stored{order: req.OrderID, leaf: leaf})
	}
	for i, c := range certs {
		if err := b.s.Revoke(ctx, c.leaf, nil); err != nil {
			t.Fatalf("revoking certificate %d: %v", i, err)
		}
		raw, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("stdin: %v\n%s", err, raw)
		}
		if got.OrderID != c.order {
			t.Errorf("revoking certificate %d (order %s), the program was told order %q", i, c.order, got.OrderID)
		}
	}
}
