package localca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
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
		if !signer.CRLEntryEncodable(e) {
			return x509.CreateRevocationList(rnd, tmpl, issuer, key)
		}
	}
	header := *tmpl
	header.RevokedCertificateEntries = nil
	der, err := assembleCRL(rnd, &header, issuer, key, len(tmpl.RevokedCertificateEntries), 48*len(tmpl.RevokedCertificateEntries),
		func(b *cryptobyte.Builder) {
			for _, e := range tmpl.RevokedCertificateEntries {
				signer.AddCRLEntry(b, e)
			}
		})
	if errors.Is(err, errUnknownSignature) {
		return x509.CreateRevocationList(rnd, tmpl, issuer, key)
	}
	return der, err
}

// createEncodedCRL is createCRL for a template without entries and the
// entries already encoded (signer.AppendCRLEntry), in their order: the
// CRL createCRL writes for the template with those entries. A signature
// algorithm createCRL leaves to x509 is refused with an error wrapping
// errors.ErrUnsupported.
func createEncodedCRL(rnd io.Reader, tmpl *x509.RevocationList, entries [][]byte, issuer *x509.Certificate, key crypto.Signer) ([]byte, error) {
	if len(tmpl.RevokedCertificates) > 0 || len(tmpl.RevokedCertificateEntries) > 0 {
		return nil, errors.New("localca: a CRL template with entries of its own besides encoded ones")
	}
	size := 0
	for _, e := range entries {
		size += len(e)
	}
	return assembleCRL(rnd, tmpl, issuer, key, len(entries), size, func(b *cryptobyte.Builder) {
		for _, e := range entries {
			b.AddBytes(e)
		}
	})
}

// errUnknownSignature: assembleCRL does not know how to sign with the
// signature algorithm x509 chose.
var errUnknownSignature = fmt.Errorf("localca: a CRL signature algorithm this does not sign itself: %w", errors.ErrUnsupported)

// assembleCRL signs the CRL of header (without entries) listing the n
// entries writeEntries writes (about size bytes), into the header x509
// builds for the template without entries.
func assembleCRL(rnd io.Reader, header *x509.RevocationList, issuer *x509.Certificate, key crypto.Signer, n, size int,
	writeEntries func(*cryptobyte.Builder)) ([]byte, error) {
	empty, err := x509.CreateRevocationList(rnd, header, issuer, key)
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
	hashOf, err := crlHash(algID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnknownSignature, err)
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

	// Room for the whole CRL at once: a CRL of 100,000 entries is 5 MB,
	// and the builder would copy it at every doubling.
	b := cryptobyte.NewBuilder(make([]byte, 0, size+len(empty)+16))
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(version)
		b.AddBytes(sigAlg)
		b.AddBytes(issuerName)
		b.AddBytes(thisUpdate)
		b.AddBytes(nextUpdate)
		if n > 0 {
			b.AddASN1(cbasn1.SEQUENCE, writeEntries)
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
	out := cryptobyte.NewBuilder(make([]byte, 0, len(tbsDER)+len(algID)+len(sig)+16))
	out.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(tbsDER)
		b.AddBytes(algID)
		b.AddASN1BitString(sig)
	})
	return out.Bytes()
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
