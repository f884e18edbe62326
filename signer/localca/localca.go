// Package localca is the local_ca signer: it signs leaves itself with a CA
// it holds, either Caddy's pki CA or an intermediate imported from PEM
// files. Finalize answers valid inline. Revocation is recorded in the ACME
// layer's ledger, and the CRL built from it is signed with the same issuer.
//
// The leaf policy trusts nothing in the CSR but its public key (and its
// common name, when that is one of the order's identifiers): names come
// from the order, extensions from this package.
package localca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

const (
	// DefaultLifetime is the validity of a leaf when Options.Lifetime is
	// zero. Seven days keeps a leaf "short-lived" in the CA/Browser Forum
	// sense (BRs §1.6.1), so it needs no revocation pointer to be sound.
	DefaultLifetime = 7 * 24 * time.Hour

	// backdate is how far before now a leaf's validity starts, so that a
	// client whose clock is a little behind ours accepts it at once.
	backdate = time.Minute

	// maxCommonName is ub-common-name (RFC 5280, Appendix A.1).
	maxCommonName = 64
)

// Options tune a Signer. The zero value is usable.
type Options struct {
	// Lifetime is the longest validity of a leaf, counted as RFC 5280
	// does, both ends inclusive; default DefaultLifetime. It must be
	// longer than the one-minute backdate, or no leaf could be valid now.
	Lifetime time.Duration
	// CRLURL, when set, is the base of every leaf's CRL distribution
	// point: the leaf names the CRL of the CA that signed it, at CRLURL
	// followed by "/" and that CA's key id (signer.CAKeyID), as the ACME
	// layer serves it at <prefix>/crl/<key id>. It must be an http URL:
	// CRLs are fetched without TLS (RFC 5280 §4.2.1.13, BRs §7.1.2.11.2),
	// since checking the CRL's server would itself need revocation
	// checking.
	CRLURL string
	// Storage keeps every issuing CA the signer signs with, so that its
	// CRL can still be signed after the CA is renewed or replaced (see
	// Storage). Nil keeps them in memory, for the life of the process
	// only.
	Storage Storage
	// Clock tells the time; default the wall clock.
	Clock clock.Clock
}

// Signer is the local_ca signer.
type Signer struct {
	src      Source
	lifetime time.Duration
	crlURL   string
	clock    clock.Clock
	book     *issuerBook
}

// OptionError is a refusal of one of the signer's settings, named as the
// configuration names it (lifetime, cert, key), so that the module
// reports it as signer.<option>, as relay.OptionError does.
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return "localca: " + e.Option + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// New returns a Signer that signs with the issuer src returns at each
// signing.
func New(src Source, opts Options) (*Signer, error) {
	if src == nil {
		return nil, errors.New("localca: no issuer source")
	}
	s := &Signer{src: src, lifetime: opts.Lifetime, crlURL: opts.CRLURL, clock: opts.Clock,
		book: &issuerBook{storage: opts.Storage, known: map[string]keptIssuer{}}}
	if s.book.storage == nil {
		s.book.storage = &memStorage{}
	}
	if s.lifetime == 0 {
		s.lifetime = DefaultLifetime
	}
	if s.lifetime <= backdate {
		return nil, &OptionError{"lifetime", fmt.Errorf("%v must be longer than %v", s.lifetime, backdate)}
	}
	if s.crlURL != "" {
		if err := checkCRLURL(s.crlURL); err != nil {
			return nil, err
		}
	}
	if s.clock == nil {
		s.clock = clock.Real()
	}
	return s, nil
}

// checkCRLURL requires an absolute http:// URL.
func checkCRLURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("localca: crl url: %w", err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("localca: crl url %q must be an absolute http:// URL", raw)
	}
	return nil
}

// Issuer returns the current issuer, checked: its first certificate is a
// CA allowed to sign certificates and its key matches it. The CRL is signed
// with what it returns.
//
// A pair that does not check is read once more before it is refused:
// Caddy's pki CA hands out its chain and its key through separate calls,
// so a renewal between them pairs the new key with the old certificate for
// a moment. What still does not check is KindUnavailable — a fault of this
// CA, never a verdict about the request — so the order waits and is
// retried instead of failing.
func (s *Signer) Issuer(ctx context.Context) (Issuer, error) {
	var last error
	for range 2 {
		iss, err := s.src(ctx)
		if err != nil {
			return Issuer{}, fmt.Errorf("localca: issuing CA: %w", err)
		}
		if last = iss.check(); last == nil {
			return iss, nil
		}
	}
	return Issuer{}, &signer.Error{Kind: signer.KindUnavailable, Detail: "the issuing CA is not usable now",
		Err: fmt.Errorf("localca: issuing CA: %w", last)}
}

// Issue signs a leaf for req at once. The returned chain is the leaf, then
// the issuing CA and any intermediates above it; a self-signed root is left
// out because a client must already trust it.
func (s *Signer) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	if req.CSR == nil {
		return signer.IssueOutcome{}, errors.New("localca: issue request without a CSR")
	}
	iss, err := s.Issuer(ctx)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	// Checked again here: the issuing CA may have changed since newOrder.
	for _, id := range req.Identifiers {
		if err := nameConstraintsRefusal(iss.Chain, id); err != nil {
			return signer.IssueOutcome{}, err
		}
	}
	tmpl, err := s.leaf(req, iss.Chain[0])
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	// The CA is recorded before it signs, so that no leaf exists whose CA
	// cannot sign its CRL once it is renewed or replaced.
	if _, err := s.book.remember(ctx, iss); err != nil {
		return signer.IssueOutcome{}, &signer.Error{Kind: signer.KindUnavailable,
			Detail: "the issuing CA cannot be recorded for its CRL now", Err: err}
	}
	// SignatureAlgorithm is left zero: crypto/x509 picks one that suits
	// the issuer's key.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, iss.Chain[0], req.CSR.PublicKey, iss.Key)
	if err != nil {
		return signer.IssueOutcome{}, fmt.Errorf("localca: signing order %s: %w", req.OrderID, err)
	}
	chain := make([][]byte, 0, 1+len(iss.Chain))
	chain = append(chain, der)
	for _, c := range iss.Chain {
		if !selfSigned(c) {
			chain = append(chain, c.Raw)
		}
	}
	return signer.IssueOutcome{Chain: chain}, nil
}

// Revoke does nothing: for a local CA the ACME layer records the
// revocation in its ledger, and the CRL is built from that ledger.
func (s *Signer) Revoke(context.Context, *x509.Certificate, *int) error { return nil }

// RevocationRoute is signer.RevokeInLedger.
func (s *Signer) RevocationRoute() signer.RevocationRoute { return signer.RevokeInLedger }

// CAChain returns the issuing CA and every certificate above it, the root
// included, so that <prefix>/ca.pem gives a client something to trust.
func (s *Signer) CAChain(ctx context.Context) ([][]byte, error) {
	iss, err := s.Issuer(ctx)
	if err != nil {
		return nil, err
	}
	chain := make([][]byte, len(iss.Chain))
	for i, c := range iss.Chain {
		chain[i] = c.Raw
	}
	return chain, nil
}

// oidTLSFeature is the TLS feature extension (RFC 7633), which a CSR
// carries to ask for OCSP Must-Staple (certbot and lego --must-staple).
var oidTLSFeature = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 24}

// leaf builds the certificate template for req. Everything in it comes
// from the order, the CSR's public key and this signer's options; the
// CSR's extensions are never copied, so a CSR cannot ask for CA:true, more
// names or more key usages. One is refused rather than left out: the TLS
// feature extension (OCSP Must-Staple). This CA runs no OCSP responder, so
// it cannot issue what it asks for, and a leaf quietly without it would
// leave its requester believing its servers enforce stapling (RFC 8555
// §7.4: a finalize fails when the CSR asks for extensions the CA will not
// include; Let's Encrypt refuses it too).
func (s *Signer) leaf(req signer.IssueRequest, ca *x509.Certificate) (*x509.Certificate, error) {
	if len(req.Identifiers) == 0 {
		return nil, errors.New("localca: issue request without identifiers")
	}
	for _, ext := range req.CSR.Extensions {
		if ext.Id.Equal(oidTLSFeature) {
			return nil, &signer.Error{Kind: signer.KindBadCSR,
				Detail: "the CSR asks for OCSP Must-Staple (the TLS feature extension); this CA runs no OCSP responder and does not issue it: request the certificate without it"}
		}
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName(req.CSR.Subject.CommonName, req.Identifiers)},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, // and IsCA false
	}
	if cp := req.CertificateProfile; cp != nil {
		if len(cp.ExtKeyUsage) > 0 {
			tmpl.ExtKeyUsage = append([]x509.ExtKeyUsage(nil), cp.ExtKeyUsage...)
		}
		if cp.OmitCommonName {
			// crypto/x509 then marks the SAN extension critical (RFC 5280
			// §4.2.1.6: an empty subject).
			tmpl.Subject = pkix.Name{}
		}
	}
	for _, id := range req.Identifiers {
		switch id.Type {
		case acme.IdentifierDNS:
			tmpl.DNSNames = append(tmpl.DNSNames, id.Value)
		case acme.IdentifierIP:
			ip := net.ParseIP(id.Value)
			if ip == nil {
				return nil, &signer.Error{Kind: signer.KindRejectedIdentifier, Detail: fmt.Sprintf("%q is not an IP address", id.Value)}
			}
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			return nil, &signer.Error{Kind: signer.KindRejectedIdentifier, Detail: fmt.Sprintf("identifier type %q is not supported", id.Type)}
		}
	}

	// keyEncipherment is for RSA key transport (TLS 1.2 RSA key exchange);
	// it means nothing for an ECDSA or Ed25519 key (RFC 8813 §3, RFC 8410
	// §5).
	switch req.CSR.PublicKey.(type) {
	case *rsa.PublicKey:
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	case *ecdsa.PublicKey, ed25519.PublicKey:
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	default:
		return nil, &signer.Error{Kind: signer.KindBadCSR, Detail: fmt.Sprintf("unsupported public key type %T", req.CSR.PublicKey)}
	}

	var err error
	if tmpl.SubjectKeyId, err = subjectKeyID(req.CSR.PublicKey); err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = randomSerial(); err != nil {
		return nil, err
	}
	if tmpl.NotBefore, tmpl.NotAfter, err = s.validity(req, ca); err != nil {
		return nil, err
	}
	base := s.crlURL
	if req.CRLURL != "" {
		if err := checkCRLURL(req.CRLURL); err != nil {
			return nil, err
		}
		base = req.CRLURL
	}
	if base != "" {
		u, _ := url.Parse(base) // checked
		tmpl.CRLDistributionPoints = []string{u.JoinPath(signer.CAKeyID(ca)).String()}
	}
	// AuthorityKeyId: crypto/x509 copies the issuer's SubjectKeyId.
	return tmpl, nil
}

// maxRequestedBackdate is how far before now a newOrder's notBefore may
// be: a client's clock a little behind ours, not a backdated certificate.
const maxRequestedBackdate = 5 * time.Minute

// maxPostdate is how far after the signing a leaf's notBefore may be: the
// CA/Browser Forum's 48 hours (BRs §7.1.2.7). A leaf that starts months
// after the validation it was issued on would vouch for a name its
// requester may no longer hold by then; and a short-lived leaf, which
// carries no CRL distribution point when crl_url is unset, could not even
// be revoked in the meantime.
const maxPostdate = 48 * time.Hour

// leafLifetime is the longest validity of a leaf under cp: the signer's,
// or the certificate profile's when that is shorter.
func (s *Signer) leafLifetime(cp *signer.CertificateProfile) time.Duration {
	if cp != nil && cp.Lifetime > 0 && cp.Lifetime < s.lifetime {
		return cp.Lifetime
	}
	return s.lifetime
}

// CheckValidity refuses at newOrder a window this signer would not issue
// exactly (signer.ValidityChecker): a notBefore more than a few minutes
// past, a window longer than the leaves it issues, or one the issuing CA
// does not cover now (Caddy's pki intermediate lasts days: a renewal of it
// before the finalize covers more, never less).
func (s *Signer) CheckValidity(ctx context.Context, notBefore, notAfter time.Time, cp *signer.CertificateProfile) error {
	now := s.clock.Now()
	if !notBefore.IsZero() && notBefore.Before(now.Add(-maxRequestedBackdate)) {
		return badValidity("notBefore %s is more than %v in the past; this CA does not backdate certificates",
			notBefore.UTC().Format(time.RFC3339), maxRequestedBackdate)
	}
	if _, _, err := s.window(notBefore, notAfter, cp, now); err != nil {
		return err
	}
	iss, err := s.Issuer(ctx)
	if err != nil {
		return nil // the finalize answers for an issuer it cannot use
	}
	if ca := iss.Chain[0]; !notAfter.IsZero() && notAfter.After(ca.NotAfter) {
		return badValidity("notAfter %s is after the issuing CA's own end, %s",
			notAfter.UTC().Format(time.RFC3339), ca.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func badValidity(format string, args ...any) *signer.Error {
	return &signer.Error{Kind: signer.KindBadValidity, Detail: fmt.Sprintf(format, args...)}
}

// window is the leaf's validity from the window the order asked for (zero
// ends left to the signer): a notBefore asked for is the leaf's, else a
// minute before now; a notAfter asked for is the leaf's, else the
// lifetime's end. Both ends are inclusive (RFC 5280 §4.1.2.5), hence the
// second taken off the lifetime, and whole seconds, the resolution of the
// encoding; a fraction of a second asked for is rounded inward. A window
// longer than the lifetime, already over, or starting more than
// maxPostdate ahead, is refused, never narrowed (RFC 8555 §7.4).
func (s *Signer) window(askedNB, askedNA time.Time, cp *signer.CertificateProfile, now time.Time) (notBefore, notAfter time.Time, err error) {
	lifetime := s.leafLifetime(cp)
	notBefore = now.Add(-backdate)
	switch {
	case !askedNB.IsZero():
		notBefore = askedNB
	case !askedNA.IsZero():
		// The start is the signer's to choose, from a minute ago to now:
		// no more backdated than a notAfter up to a lifetime from now
		// leaves room for.
		if room := askedNA.Truncate(time.Second).Add(-lifetime + time.Second); room.After(notBefore) {
			notBefore = room
			if notBefore.After(now) {
				notBefore = now
			}
		}
	}
	if t := notBefore.Truncate(time.Second); t.Before(notBefore) {
		notBefore = t.Add(time.Second)
	}
	notAfter = notBefore.Add(lifetime - time.Second)
	if !askedNA.IsZero() {
		notAfter = askedNA.Truncate(time.Second)
	}
	switch {
	case notBefore.After(now.Add(maxPostdate)):
		return notBefore, notAfter, badValidity("notBefore %s is more than %v ahead; this CA does not postdate certificates",
			notBefore.UTC().Format(time.RFC3339), maxPostdate)
	case !notAfter.After(now):
		return notBefore, notAfter, badValidity("notAfter %s has passed", notAfter.UTC().Format(time.RFC3339))
	case notAfter.Before(notBefore):
		return notBefore, notAfter, badValidity("notAfter %s is before notBefore %s",
			notAfter.UTC().Format(time.RFC3339), notBefore.UTC().Format(time.RFC3339))
	case notAfter.Sub(notBefore) >= lifetime:
		return notBefore, notAfter, badValidity("a certificate valid from %s to %s would be valid for %s; this profile issues certificates valid for at most %v",
			notBefore.UTC().Format(time.RFC3339), notAfter.UTC().Format(time.RFC3339), spanText(notBefore, notAfter), lifetime)
	}
	return notBefore, notAfter, nil
}

// spanText is how long a validity from notBefore to notAfter, both
// inclusive, lasts. A time.Duration spans at most 292 years, and a
// notAfter in year 9999 asks for more: said so, rather than the
// saturated span plus its last second wrapping to a negative one.
func spanText(notBefore, notAfter time.Time) string {
	d := notAfter.Sub(notBefore)
	if d > math.MaxInt64-time.Second {
		return "more than 292 years"
	}
	return (d + time.Second).String()
}

// validity returns the leaf's NotBefore and NotAfter: the window (above)
// inside the issuing CA's own validity, so that a leaf never outlives its
// issuer. An end the client left to the signer is moved inside it; an end
// it asked for that the CA does not cover is refused.
func (s *Signer) validity(req signer.IssueRequest, ca *x509.Certificate) (notBefore, notAfter time.Time, err error) {
	now := s.clock.Now()
	if now.Before(ca.NotBefore) || now.After(ca.NotAfter) {
		return time.Time{}, time.Time{}, &signer.Error{
			Kind:   signer.KindUnavailable,
			Detail: "the issuing CA is not valid now",
			Err:    fmt.Errorf("issuing CA %q is valid from %v to %v, now is %v", ca.Subject, ca.NotBefore, ca.NotAfter, now),
		}
	}
	notBefore, notAfter, err = s.window(req.NotBefore, req.NotAfter, req.CertificateProfile, now)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	if req.NotBefore.IsZero() {
		notBefore = latest(notBefore, ca.NotBefore)
	}
	if req.NotAfter.IsZero() && ca.NotAfter.Before(notAfter) {
		notAfter = ca.NotAfter
	}
	if notBefore.Before(ca.NotBefore) || notAfter.After(ca.NotAfter) || notAfter.Before(notBefore) {
		return time.Time{}, time.Time{}, badValidity("the issuing CA is valid from %s to %s; it cannot sign a certificate valid from %s to %s",
			ca.NotBefore.UTC().Format(time.RFC3339), ca.NotAfter.UTC().Format(time.RFC3339),
			notBefore.UTC().Format(time.RFC3339), notAfter.UTC().Format(time.RFC3339))
	}
	return notBefore, notAfter, nil
}

func latest(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// commonName picks the subject CN. The CN is deprecated for server names
// (browsers read only the SAN), but some clients and tools still display
// or match it. It is the CSR's CN when that is one of the order's
// identifiers, else the first DNS identifier short enough for a CN, else
// none (the subject is then empty and crypto/x509 marks the SAN critical,
// RFC 5280 §4.2.1.6). It is always written as the identifier, so it
// matches a SAN entry byte for byte.
func commonName(csrCN string, ids []acme.Identifier) string {
	if csrCN != "" {
		csrIP := net.ParseIP(csrCN)
		for _, id := range ids {
			if len(id.Value) > maxCommonName {
				continue
			}
			if id.Type == acme.IdentifierDNS && strings.EqualFold(id.Value, csrCN) ||
				id.Type == acme.IdentifierIP && csrIP != nil && csrIP.Equal(net.ParseIP(id.Value)) {
				return id.Value
			}
		}
	}
	for _, id := range ids {
		if id.Type == acme.IdentifierDNS && len(id.Value) <= maxCommonName {
			return id.Value
		}
	}
	return ""
}

// serialLimit bounds serials to 128 bits: far more than the 64 bits of
// entropy the BRs (§7.1) ask for, and well inside RFC 5280's 20 octets.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// randomSerial returns a random serial in [1, 2^128). Random serials make
// a leaf's contents unpredictable to whoever asks for it, and need no
// coordination between Caddy instances sharing a database.
func randomSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, fmt.Errorf("localca: serial number: %w", err)
		}
		if n.Sign() > 0 { // RFC 5280 §4.1.2.2: positive
			return n, nil
		}
	}
}

// subjectKeyID derives the key identifier of pub as crypto/x509 does for
// CA certificates: the leftmost 160 bits of the SHA-256 of the
// subjectPublicKey bits (RFC 7093 §2, method 1).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("localca: subject key identifier: %w", err)
	}
	var info struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(spki, &info); err != nil {
		return nil, fmt.Errorf("localca: subject key identifier: %w", err)
	}
	sum := sha256.Sum256(info.PublicKey.Bytes)
	return sum[:20], nil
}

// selfSigned reports whether c is a root: issued by itself and verified
// by its own key. Matching names alone are not enough; a CA renewing its
// key issues a certificate with its own name under its old key.
func selfSigned(c *x509.Certificate) bool {
	if !bytes.Equal(c.RawSubject, c.RawIssuer) {
		return false
	}
	// Checking the signature costs a public-key verification, and every
	// issuance asks about the same few CA certificates: remember answers.
	key := string(c.Raw)
	if v, ok := selfSignedCache.Load(key); ok {
		return v.(bool)
	}
	ok := c.CheckSignatureFrom(c) == nil
	selfSignedCache.Store(key, ok)
	return ok
}

// selfSignedCache maps a CA certificate's DER to whether it is self-signed.
// It holds only issuing CAs and their parents, a handful per process.
var selfSignedCache sync.Map

var (
	_ signer.Signer            = (*Signer)(nil)
	_ signer.CAChainer         = (*Signer)(nil)
	_ signer.CRLSigner         = (*Signer)(nil)
	_ signer.EncodedCRLSigner  = (*Signer)(nil)
	_ signer.IdentifierChecker = (*Signer)(nil)
)
