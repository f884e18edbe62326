package signer

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
)

// CRLSigner is implemented by signers that publish a CRL for what they
// issue (a local CA). The ACME layer keeps the revocation ledger and builds
// each CRL from it; the signer signs it with the CA that issued the
// entries, which a CRL must be signed by (RFC 5280 §5).
type CRLSigner interface {
	// CRLIssuer returns the key id (CAKeyID) of the CA that issues now.
	CRLIssuer(ctx context.Context) (string, error)
	// SignCRL signs tmpl with the CA whose key id is issuerKeyID, and
	// returns the CRL's DER. An error wrapping ErrIssuerRetired says the
	// signer no longer holds that CA (it was renewed with a new key).
	SignCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList) ([]byte, error)
}

// ErrIssuerRetired: the CA a CRL was asked for is not the one the signer
// holds now.
var ErrIssuerRetired = errors.New("signer: the issuing CA is no longer held")

// CAKeyID names an issuing CA by its key: its subject key identifier in
// hex, which every leaf it signs carries as its authority key identifier
// (crypto/x509 copies it). A CA without one is named by its subject.
func CAKeyID(ca *x509.Certificate) string {
	if len(ca.SubjectKeyId) > 0 {
		return hex.EncodeToString(ca.SubjectKeyId)
	}
	sum := sha256.Sum256(ca.RawSubject)
	return "name:" + hex.EncodeToString(sum[:20])
}

// LeafIssuerKeyID names the CA that signed leaf, as CAKeyID names it.
func LeafIssuerKeyID(leaf *x509.Certificate) string {
	if len(leaf.AuthorityKeyId) > 0 {
		return hex.EncodeToString(leaf.AuthorityKeyId)
	}
	sum := sha256.Sum256(leaf.RawIssuer)
	return "name:" + hex.EncodeToString(sum[:20])
}
