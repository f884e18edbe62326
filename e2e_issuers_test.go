package caddyacmeproxy

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// The local_ca module keeps every CA it signs with in Caddy's storage,
// beside the pki app's own keys, so that the CA's CRL can still be signed
// once Caddy renews its intermediate with a new key.
func TestTheLocalCAKeepsItsIssuingCAInCaddyStorageBeforeALeafIsReturned(t *testing.T) {
	b := newRevokeBench(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 2*e2eWait)
	defer cancel()
	got := b.obtain(ctx, t, newE2EXCrypto(ctx, t, b.env), "kept-ca.example.com")
	inter, err := x509.ParseCertificate(got.chain[1])
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(b.env.Storage, "acme_proxy", "issuers", e2eProfile, hex.EncodeToString(got.leaf.AuthorityKeyId)+".pem")
	info, err := os.Stat(file)
	if err != nil {
		t.Fatalf("the issuing CA of the leaf is not in Caddy storage: %v", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s has mode %v; a CA key must be readable by its owner only", file, info.Mode().Perm())
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var (
		certs [][]byte
		key   crypto.Signer
	)
	for block, rest := pem.Decode(raw); block != nil; block, rest = pem.Decode(rest) {
		switch block.Type {
		case "CERTIFICATE":
			certs = append(certs, block.Bytes)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				t.Fatalf("the kept key does not parse: %v", err)
			}
			key, _ = k.(crypto.Signer)
		}
	}
	if len(certs) == 0 || !bytes.Equal(certs[0], inter.Raw) {
		t.Errorf("the record holds %d certificates, not first the leaf's issuing CA", len(certs))
	}
	pub, ok := inter.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if key == nil || !ok || !pub.Equal(key.Public()) {
		t.Error("the record does not hold the issuing CA's key")
	}
}
