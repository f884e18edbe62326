package signer

import (
	"context"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"time"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// EncodedCRLSigner is a CRLSigner that also signs a CRL whose entries
// come already encoded (AppendCRLEntry). A CRL of 100,000 entries is
// 5 MB, and encoding its entries is most of the work of building it; a
// caller that keeps the entries of the last CRL it built encodes only
// those revoked since.
type EncodedCRLSigner interface {
	CRLSigner
	// SignEncodedCRL signs tmpl, which has no entries of its own, listing
	// entries in their order: the CRL SignCRL signs for tmpl with those
	// entries (byte for byte but for the signature). Its errors are
	// SignCRL's, or one wrapping errors.ErrUnsupported when it cannot
	// sign tmpl so (SignCRL can).
	SignEncodedCRL(ctx context.Context, issuerKeyID string, tmpl *x509.RevocationList, entries [][]byte) ([]byte, error)
}

// ErrCRLEntryNotEncodable: AppendCRLEntry writes only what the ACME layer
// puts on a CRL: a serial, a revocation time and a reason code.
var ErrCRLEntryNotEncodable = errors.New("signer: a CRL entry with extensions, or without a serial or time, is encoded by x509 only")

// AppendCRLEntry appends one revokedCertificates entry to dst, encoded as
// x509.CreateRevocationList encodes it (through encoding/asn1's
// pkix.RevokedCertificate): serial, revocation time (in UTC; UTCTime from
// 1950 to 2049, GeneralizedTime otherwise), and the reason code extension
// unless the reason is 0. An entry with extensions, or without a serial
// or a revocation time, is refused (ErrCRLEntryNotEncodable).
func AppendCRLEntry(dst []byte, e x509.RevocationListEntry) ([]byte, error) {
	if !CRLEntryEncodable(e) {
		return dst, ErrCRLEntryNotEncodable
	}
	b := cryptobyte.NewBuilder(dst)
	AddCRLEntry(b, e)
	return b.Bytes()
}

// EncodeCRLEntries encodes n entries (entry(i) for each i, in order) as
// AppendCRLEntry does, into one buffer, and returns each one's bytes in
// it: a CRL of 100,000 entries in one allocation instead of 100,000.
func EncodeCRLEntries(n int, entry func(i int) (x509.RevocationListEntry, error)) ([][]byte, error) {
	var (
		buf  = make([]byte, 0, 48*n)
		ends = make([]int, n)
	)
	for i := range n {
		e, err := entry(i)
		if err != nil {
			return nil, err
		}
		if buf, err = AppendCRLEntry(buf, e); err != nil {
			return nil, err
		}
		ends[i] = len(buf)
	}
	out := make([][]byte, n)
	start := 0
	for i, end := range ends {
		out[i] = buf[start:end:end]
		start = end
	}
	return out, nil
}

// CRLEntryEncodable reports whether AddCRLEntry writes e as x509 does.
func CRLEntryEncodable(e x509.RevocationListEntry) bool {
	return len(e.Extensions) == 0 && len(e.ExtraExtensions) == 0 && e.SerialNumber != nil && !e.RevocationTime.IsZero()
}

var oidReasonCode = asn1.ObjectIdentifier{2, 5, 29, 21}

// AddCRLEntry writes e, which CRLEntryEncodable accepts, to b as
// AppendCRLEntry does.
func AddCRLEntry(b *cryptobyte.Builder, e x509.RevocationListEntry) {
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
