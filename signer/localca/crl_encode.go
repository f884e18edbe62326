package localca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// createCRL is x509.CreateRevocationList for a template that has only
// RevokedCertificateEntries with SerialNumber, RevocationTime and
// ReasonCode (what the authority builds): the same DER, byte for byte
// (TestTheCRLEncoderMatchesTheStandardLibrarysByteForByte), in a fraction
// of the time. x509 encodes the entries by reflection, about 1 s of CPU
// for 100,000 of them, most of a CRL regeneration; here they are written
// directly, into the header (version, signature algorithm, issuer, times,
// extensions) that x509 builds for the same template without entries,
// and the result is signed as x509 signs it. Any other template, or a
// signature algorithm this does not know how to hash, goes to x509.
func createCRL(rnd io.Reader, tmpl *x509.RevocationList, issuer *x509.Certificate, key crypto.Signer) ([]byte, error) {
	if len(tmpl.RevokedCertificates) > 0 {
		return x509.CreateRevocationList(rnd, tmpl, issuer, key)
	}
	for _, e := range tmpl.RevokedCertificateEntries {
		if len(e.Extensions) > 0 || len(e.ExtraExtensions) > 0 || e.SerialNumber == nil || e.RevocationTime.IsZero() {
			return x509.CreateRevocationList(rnd, tmpl, issuer, key)
		}
	}
	header := *tmpl
	header.RevokedCertificateEntries = nil
	empty, err := x509.CreateRevocationList(rnd, &header, issuer, key)
	if err != nil {
		return nil, err
	}
	var (
		in, tbs, algID, version, sigAlg, issuerName cryptobyte.String
		thisUpdate, nextUpdate                      cryptobyte.String
		thisTag, nextTag                            cbasn1.Tag
	)
	in = empty
	if !in.ReadASN1(&in, cbasn1.SEQUENCE) || !in.ReadASN1Element(&tbs, cbasn1.SEQUENCE) || !in.ReadASN1Element(&algID, cbasn1.SEQUENCE) {
		return nil, errors.New("localca: x509 built a CRL this cannot read")
	}
	var hashOf crypto.Hash
	if hashOf, err = crlHash(algID); err != nil {
		return x509.CreateRevocationList(rnd, tmpl, issuer, key)
	}
	if !tbs.ReadASN1(&tbs, cbasn1.SEQUENCE) ||
		!tbs.ReadASN1Element(&version, cbasn1.INTEGER) ||
		!tbs.ReadASN1Element(&sigAlg, cbasn1.SEQUENCE) ||
		!tbs.ReadASN1Element(&issuerName, cbasn1.SEQUENCE) ||
		!tbs.ReadAnyASN1Element(&thisUpdate, &thisTag) ||
		!tbs.ReadAnyASN1Element(&nextUpdate, &nextTag) {
		return nil, errors.New("localca: x509 built a CRL header this cannot read")
	}
	rest := tbs // the extensions, [0] EXPLICIT

	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(version)
		b.AddBytes(sigAlg)
		b.AddBytes(issuerName)
		b.AddBytes(thisUpdate)
		b.AddBytes(nextUpdate)
		if len(tmpl.RevokedCertificateEntries) > 0 {
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
				for _, e := range tmpl.RevokedCertificateEntries {
					addCRLEntry(b, e)
				}
			})
		}
		b.AddBytes(rest)
	})
	tbsDER, err := b.Bytes()
	if err != nil {
		return nil, fmt.Errorf("localca: encoding the CRL: %w", err)
	}
	signed := tbsDER
	if hashOf != 0 {
		h := hashOf.New()
		h.Write(tbsDER)
		signed = h.Sum(nil)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	sig, err := key.Sign(rnd, signed, hashOf)
	if err != nil {
		return nil, fmt.Errorf("localca: signing the CRL: %w", err)
	}
	var out cryptobyte.Builder
	out.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(tbsDER)
		b.AddBytes(algID)
		b.AddASN1BitString(sig)
	})
	return out.Bytes()
}

var oidReasonCode = asn1.ObjectIdentifier{2, 5, 29, 21}

// addCRLEntry writes one revokedCertificates entry as encoding/asn1
// writes x509's pkix.RevokedCertificate: serial, revocation time (UTC;
// UTCTime from 1950 to 2049, GeneralizedTime otherwise), and the reason
// code extension unless the reason is 0.
func addCRLEntry(b *cryptobyte.Builder, e x509.RevocationListEntry) {
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1BigInt(e.SerialNumber)
		addTime(b, e.RevocationTime.UTC())
		if e.ReasonCode != 0 {
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
					b.AddASN1ObjectIdentifier(oidReasonCode)
					b.AddASN1(cbasn1.OCTET_STRING, func(b *cryptobyte.Builder) {
						b.AddASN1Enum(int64(e.ReasonCode))
					})
				})
			})
		}
	})
}

func addTime(b *cryptobyte.Builder, t time.Time) {
	if t.Year() < 1950 || t.Year() >= 2050 {
		b.AddASN1GeneralizedTime(t)
		return
	}
	b.AddASN1UTCTime(t)
}

// crlHash is the hash the signature algorithm algID signs (0 for
// Ed25519, which signs the message itself); an error for one this does
// not sign itself (RSA-PSS, which needs its options, or an unknown one).
func crlHash(algID cryptobyte.String) (crypto.Hash, error) {
	var oid asn1.ObjectIdentifier
	if !algID.ReadASN1(&algID, cbasn1.SEQUENCE) || !algID.ReadASN1ObjectIdentifier(&oid) {
		return 0, errors.New("unreadable algorithm identifier")
	}
	for _, a := range []struct {
		oid  asn1.ObjectIdentifier
		hash crypto.Hash
	}{
		{asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}, crypto.SHA256}, // ecdsa-with-SHA256
		{asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}, crypto.SHA384},
		{asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}, crypto.SHA512},
		{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}, crypto.SHA256}, // sha256WithRSAEncryption
		{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 12}, crypto.SHA384},
		{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 13}, crypto.SHA512},
		{asn1.ObjectIdentifier{1, 3, 101, 112}, 0}, // Ed25519
	} {
		if oid.Equal(a.oid) {
			return a.hash, nil
		}
	}
	return 0, fmt.Errorf("signature algorithm %v", oid)
}
