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
	entries := tmpl.RevokedCertificateEntries
	encoded, err := signer.EncodeCRLEntries(len(entries), func(i int) (x509.RevocationListEntry, error) { return entries[i], nil })
	if err != nil {
		return nil, err
	}
	der, err := assembleCRL(rnd, &header, issuer, key, encoded)
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
	return assembleCRL(rnd, tmpl, issuer, key, entries)
}

// errUnknownSignature: assembleCRL does not know how to sign with the
// signature algorithm x509 chose.
var errUnknownSignature = fmt.Errorf("localca: a CRL signature algorithm this does not sign itself: %w", errors.ErrUnsupported)

// assembleCRL signs the CRL of header (without entries) listing the
// encoded entries, in order, in the header x509 builds for the template
// without entries.
//
// Every length is known before a byte is written, so the CRL is written
// once, into one buffer of its size: its DER headers first, then the
// entries, then — once the to-be-signed bytes are hashed and signed — the
// algorithm and the signature after them. (A builder that learns a
// length only once its content is written moves the content to make room
// for it: for a CRL of 100,000 entries, 5 MB, once per level, and once
// more to wrap the signed part.)
func assembleCRL(rnd io.Reader, header *x509.RevocationList, issuer *x509.Certificate, key crypto.Signer, entries [][]byte) ([]byte, error) {
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

	list := 0 // revokedCertificates' content
	for _, e := range entries {
		list += len(e)
	}
	body := len(version) + len(sigAlg) + len(issuerName) + len(thisUpdate) + len(nextUpdate) + len(rest)
	if len(entries) > 0 {
		body += derHeaderLen(list) + list
	}
	tbsLen := derHeaderLen(body) + body
	// The signature's length is known only once it is made: room for the
	// longest outer header, written in front of the rest at the end, and
	// for any signature up to an RSA key of 8,192 bits behind it (a longer
	// one only costs the buffer a copy).
	const outerRoom, sigRoom = 1 + 1 + 8, 16 + 1024
	buf := make([]byte, outerRoom, outerRoom+tbsLen+len(algID)+sigRoom)
	buf = appendDERHeader(buf, byte(cbasn1.SEQUENCE), body)
	buf = append(buf, version...)
	buf = append(buf, sigAlg...)
	buf = append(buf, issuerName...)
	buf = append(buf, thisUpdate...)
	buf = append(buf, nextUpdate...)
	if len(entries) > 0 {
		buf = appendDERHeader(buf, byte(cbasn1.SEQUENCE), list)
		for _, e := range entries {
			buf = append(buf, e...)
		}
	}
	buf = append(buf, rest...)
	tbsDER := buf[outerRoom:]
	if len(tbsDER) != tbsLen {
		return nil, fmt.Errorf("localca: the CRL's to-be-signed part came out %d bytes long, not %d", len(tbsDER), tbsLen)
	}
	signed := []byte(tbsDER)
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
	buf = append(buf, algID...)
	buf = appendDERHeader(buf, byte(cbasn1.BIT_STRING), 1+len(sig))
	buf = append(buf, 0) // no unused bits
	buf = append(buf, sig...)
	content := len(buf) - outerRoom
	start := outerRoom - derHeaderLen(content)
	appendDERHeader(buf[start:start], byte(cbasn1.SEQUENCE), content)
	return buf[start:], nil
}

// derHeaderLen is the length of a DER tag and length for content of n
// bytes (a one-byte tag).
func derHeaderLen(n int) int {
	if n < 0x80 {
		return 2
	}
	l := 1
	for v := n; v > 0xff; v >>= 8 {
		l++
	}
	return 2 + l
}

// appendDERHeader appends a one-byte tag and the DER length n.
func appendDERHeader(b []byte, tag byte, n int) []byte {
	b = append(b, tag)
	if n < 0x80 {
		return append(b, byte(n))
	}
	l := derHeaderLen(n) - 2
	b = append(b, 0x80|byte(l))
	for i := l - 1; i >= 0; i-- {
		b = append(b, byte(n>>(8*i)))
	}
	return b
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
