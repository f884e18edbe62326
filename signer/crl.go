package signer

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"time"
)

// CRLSigner is implemented by signers that publish a CRL for what they
// issue (a local CA). The ACME layer keeps the revocation ledger and builds
// each CRL from it; the signer signs it with the CA that issued the
// entries, which a CRL must be signed by (RFC 5280 §5).
//
// A CA's key changes while its leaves live on (Caddy renews its
// intermediate with a new key; an operator replaces an imported CA), so a
// CRLSigner remembers every CA it has signed a leaf with, and signs the CRL
// of each until no leaf it signed can still be valid.
type CRLSigner interface {
	// CRLIssuer returns the key id (CAKeyID) of the CA that issues now.
	CRLIssuer(ctx context.Context) (string, error)
	// CRLIssuers lists the CAs whose CRL must still be published: the
	// one that issues now and every earlier one this signer signed with
	// whose certificate has not expired (a leaf never outlives its CA).
	// When err is not nil the list still holds every CA that could be
	// read.
	CRLIssuers(ctx context.Context) ([]IssuerInfo, error)
	// LookupCRLIssuer describes the CA whose key id is keyID and makes sure
	// its key can sign now. An error wrapping ErrIssuerUnknown says this
	// signer never signed with that CA (or has lost it); one wrapping
	// ErrIssuerUnavailable says it cannot reach the CA's key now.
	LookupCRLIssuer(ctx context.Context, keyID string) (IssuerInfo, error)
	// SignCRL signs tmpl with the CA whose key id is issuerKeyID, and
	// returns the CRL's DER. Its errors wrap ErrIssuerUnknown or
	// ErrIssuerUnavailable as LookupCRLIssuer's do, or ErrIssuerRetired
	// once the CA's certificate has expired.
	SignCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList) ([]byte, error)
}

// IssuerInfo describes an issuing CA whose CRL a CRLSigner signs.
type IssuerInfo struct {
	// KeyID is CAKeyID of the CA: its CRL's identity here.
	KeyID string
	// NameID is CANameID of the CA. cRLNumber increases per name, not per
	// key (RFC 5280 §5.2.3): a CA renewed with a new key under the same
	// name continues the sequence instead of restarting it.
	NameID string
	// Subject is the CA's name, for logs and operators.
	Subject string
	// NotAfter is the end of the CA's validity, and so of every leaf it
	// signed: its CRL is published until then, and no longer.
	NotAfter time.Time
}

var (
	// ErrIssuerRetired: the CA's certificate has expired, and with it
	// every leaf it signed; its CRL is no longer published.
	ErrIssuerRetired = errors.New("signer: the issuing CA has expired")
	// ErrIssuerUnknown: the signer has no record of the CA: it never
	// signed with it, or the record is lost.
	ErrIssuerUnknown = errors.New("signer: the issuing CA is not known to this signer")
	// ErrIssuerUnavailable: the signer knows the CA but cannot reach its
	// key now (its storage failed); asking later may succeed.
	ErrIssuerUnavailable = errors.New("signer: the issuing CA's key cannot be reached now")
)

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

// CANameID names an issuing CA by its subject (the DER of its name), the
// same for every key the CA is renewed with.
func CANameID(ca *x509.Certificate) string {
	sum := sha256.Sum256(ca.RawSubject)
	return "subject:" + hex.EncodeToString(sum[:20])
}

// LeafIssuerKeyID names the CA that signed leaf, as CAKeyID names it.
func LeafIssuerKeyID(leaf *x509.Certificate) string {
	if len(leaf.AuthorityKeyId) > 0 {
		return hex.EncodeToString(leaf.AuthorityKeyId)
	}
	sum := sha256.Sum256(leaf.RawIssuer)
	return "name:" + hex.EncodeToString(sum[:20])
}
