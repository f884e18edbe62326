package authority

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Renewal information (RFC 9773): the suggested window of each
// certificate, an operator's request to renew early, and newOrder's
// "replaces".

// RenewalConfig places the renewal windows of a profile's certificates.
type RenewalConfig struct {
	// Point is where in a certificate's life its window is centred, as a
	// fraction of its lifetime (0 < Point < 1). Default
	// DefaultRenewalPoint.
	Point float64
	// RetryAfter is how long a renewalInfo answer holds (its Retry-After
	// and max-age). Default DefaultRenewalRetryAfter.
	RetryAfter time.Duration
}

const (
	// DefaultRenewalPoint centres the window two thirds into a
	// certificate's life: it is renewed in its last third, as Let's
	// Encrypt's Boulder suggests.
	DefaultRenewalPoint = 2.0 / 3
	// DefaultRenewalRetryAfter is the Retry-After of a renewalInfo
	// answer: a few times a day, as RFC 9773 §4.3 expects of clients.
	DefaultRenewalRetryAfter = 6 * time.Hour
	// MinRenewalRetryAfter and MaxRenewalRetryAfter bound a configured
	// RetryAfter: RFC 9773 §4.3 suggests clients treat a Retry-After
	// under a minute as a minute and one over a day as a day, so a value
	// outside would not be honoured (and 1ms answered Retry-After: 0).
	MinRenewalRetryAfter = time.Minute
	MaxRenewalRetryAfter = 24 * time.Hour
	// renewalSpread is the share of the lifetime the window spans on each
	// side of its point (Boulder: 1%), so a fleet issued at once does
	// not renew at once.
	renewalSpread = 100
	// pastWindow is where a window that asks for renewal now lies: it
	// opens an hour before the revocation or the operator's request and
	// closes half an hour later (Boulder's RenewalInfoImmediate), so it is
	// in the past when any client reads it, and the client renews at once.
	pastWindowStart, pastWindowLength = time.Hour, 30 * time.Minute
	// maxCertIDLen bounds a certID: a 20-octet serial and a 64-octet key
	// identifier need far less.
	maxCertIDLen = 256
)

// withDefaults fills the zero fields.
func (c RenewalConfig) withDefaults() RenewalConfig {
	if c.Point == 0 {
		c.Point = DefaultRenewalPoint
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRenewalRetryAfter
	}
	return c
}

// Validate checks the configuration; zero fields are defaults.
func (c RenewalConfig) Validate() error {
	if !(c.Point >= 0 && c.Point < 1) { // NaN fails too
		return fmt.Errorf("point: must lie between 0 and 1 (a fraction of the lifetime), not %v", c.Point)
	}
	if c.RetryAfter < 0 {
		return fmt.Errorf("retry_after: must be positive, not %s", c.RetryAfter)
	}
	if c.RetryAfter != 0 {
		if err := CheckRenewalRetryAfter(c.RetryAfter); err != nil {
			return fmt.Errorf("retry_after: %w", err)
		}
	}
	return nil
}

// CheckRenewalRetryAfter refuses a configured Retry-After outside
// MinRenewalRetryAfter to MaxRenewalRetryAfter (the Caddyfile adapter
// checks with it too).
func CheckRenewalRetryAfter(d time.Duration) error {
	if d < MinRenewalRetryAfter || d > MaxRenewalRetryAfter {
		return fmt.Errorf("%s is outside %s to %s, the checking intervals RFC 9773 §4.3 has clients keep to",
			d, MinRenewalRetryAfter, MaxRenewalRetryAfter)
	}
	return nil
}

// CertID is a certificate's identity in RFC 9773 §4.1: the key identifier
// of its issuer's key (its authority key identifier) and its serial.
type CertID struct {
	AKI    []byte
	Serial *big.Int
}

// String renders id as a certID: base64url(AKI) "." base64url(the DER
// content octets of the serial).
func (id CertID) String() string {
	return base64.RawURLEncoding.EncodeToString(id.AKI) + "." + base64.RawURLEncoding.EncodeToString(serialOctets(id.Serial))
}

// serialOctets are the content octets of a positive INTEGER's DER: its
// big-endian bytes, with a leading zero when the first would read as a
// sign bit.
func serialOctets(n *big.Int) []byte {
	b := n.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	return b
}

// CertIDOf is the certID of leaf.
func CertIDOf(leaf *x509.Certificate) CertID {
	return CertID{AKI: leaf.AuthorityKeyId, Serial: leaf.SerialNumber}
}

// ParseCertID reads a certID (RFC 9773 §4.1). Anything that is not one —
// a missing or extra ".", padding, characters outside base64url, bits
// past the last byte, an empty part, a zero serial, a needless leading
// zero, a serial longer than RFC 5280's 20 octets — is a malformed
// problem. What it takes renders back to the same string, but for one
// leniency: a serial whose first octet has its high bit set, written
// without the zero octet DER puts before it (which DER would read as a
// negative number), is read as the unsigned serial it plainly is, as
// Let's Encrypt's Boulder and Pebble read it — clients that build the
// certID from the serial's magnitude (Go's big.Int.Bytes) work against
// them, and would fail here on every other certificate. It renders back
// with the zero octet.
func ParseCertID(s string) (CertID, error) {
	if len(s) > maxCertIDLen {
		return CertID{}, problem.MalformedF("a certID is at most %d characters", maxCertIDLen)
	}
	// The base64 decoder skips CR and LF; a certID has none.
	if strings.IndexFunc(s, func(r rune) bool { return !isBase64URL(r) && r != '.' }) >= 0 {
		return CertID{}, problem.MalformedF("a certID holds only base64url characters and one \".\" (RFC 9773 §4.1)")
	}
	akiPart, serialPart, ok := strings.Cut(s, ".")
	if !ok || strings.Contains(serialPart, ".") {
		return CertID{}, problem.MalformedF("a certID is base64url(keyIdentifier) \".\" base64url(serial) (RFC 9773 §4.1)")
	}
	enc := base64.RawURLEncoding.Strict()
	aki, err := enc.DecodeString(akiPart)
	if err != nil || len(aki) == 0 {
		return CertID{}, problem.MalformedF("the certID's key identifier is not unpadded base64url of at least one byte")
	}
	der, err := enc.DecodeString(serialPart)
	if err != nil || len(der) == 0 {
		return CertID{}, problem.MalformedF("the certID's serial is not unpadded base64url of at least one byte")
	}
	switch {
	case len(der) == 1 && der[0] == 0:
		return CertID{}, problem.MalformedF("the certID's serial is zero; serials are positive (RFC 5280 §4.1.2.2)")
	case len(der) > 1 && der[0] == 0 && der[1]&0x80 == 0:
		return CertID{}, problem.MalformedF("the certID's serial is not minimally encoded (a DER INTEGER has no needless leading zero)")
	case len(der) > 21 || (len(der) == 21 && der[0] != 0):
		return CertID{}, problem.MalformedF("the certID's serial is longer than 20 octets (RFC 5280 §4.1.2.2)")
	}
	return CertID{AKI: aki, Serial: new(big.Int).SetBytes(der)}, nil
}

func isBase64URL(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// certificateOf finds the certificate of this profile a certID names:
// its serial, issued under the key the certID's key identifier names —
// a serial is unique per issuing CA only, so several CAs' certificates
// may have it, and the key identifier picks one. Another issuer's
// serial, another profile's and an unknown one are all the same NotFound
// problem.
func (au *Authority) certificateOf(ctx context.Context, id CertID) (store.Certificate, *x509.Certificate, [][]byte, error) {
	notFound := problem.NotFound("certificate")
	candidates, err := au.db.CertificatesBySerial(ctx, au.cfg.Profile, hex.EncodeToString(id.Serial.Bytes()))
	if errors.Is(err, store.ErrNotFound) {
		return store.Certificate{}, nil, nil, notFound
	}
	if err != nil {
		return store.Certificate{}, nil, nil, err
	}
	for _, c := range candidates {
		chain, err := chainDER(c.ChainPEM)
		if err != nil {
			return store.Certificate{}, nil, nil, fmt.Errorf("certificate %s: %w", c.ID, err)
		}
		leaf, err := x509.ParseCertificate(chain[0])
		if err != nil {
			return store.Certificate{}, nil, nil, fmt.Errorf("certificate %s: %w", c.ID, err)
		}
		if bytes.Equal(leaf.AuthorityKeyId, id.AKI) {
			return c, leaf, chain, nil
		}
	}
	return store.Certificate{}, nil, nil, notFound
}

// chainDER reads a stored PEM chain.
func chainDER(chainPEM string) ([][]byte, error) {
	out := signer.ChainDERs([]byte(chainPEM))
	if len(out) == 0 {
		return nil, errors.New("the stored chain holds no certificate")
	}
	return out, nil
}

// RenewalInfo answers renewalInfo for certID (RFC 9773 §4.2): a revoked
// certificate's window, and that of a certificate an operator asked to
// renew early, lie in the past; otherwise the signer's window when it
// has one (signer.RenewalInfoSource), else the window around the
// configured point of the certificate's life. RetryAfter is always set.
// A malformed certID is a malformed problem; one naming no certificate
// of this profile (or another issuer's) is a NotFound problem.
func (au *Authority) RenewalInfo(ctx context.Context, certID string) (signer.RenewalInfo, error) {
	id, err := ParseCertID(certID)
	if err != nil {
		return signer.RenewalInfo{}, err
	}
	c, leaf, chain, err := au.certificateOf(ctx, id)
	if err != nil {
		return signer.RenewalInfo{}, err
	}
	cfg := au.cfg.Renewal.withDefaults()
	info := au.renewalWindow(ctx, c, leaf, chain, cfg)
	if info.RetryAfter <= 0 {
		info.RetryAfter = cfg.RetryAfter
	}
	return info, nil
}

func (au *Authority) renewalWindow(ctx context.Context, c store.Certificate, leaf *x509.Certificate, chain [][]byte, cfg RenewalConfig) signer.RenewalInfo {
	switch {
	case !c.RevokedAt.IsZero():
		return pastWindow(c.RevokedAt, "")
	case !c.RenewEarlyAt.IsZero():
		return pastWindow(c.RenewEarlyAt, c.ExplanationURL)
	}
	if src, ok := au.signer.(signer.RenewalInfoSource); ok {
		info, err := src.RenewalInfo(ctx, leaf, chain)
		switch {
		case err == nil && info.End.After(info.Start):
			return info
		case err == nil:
			if log, n := au.renewalInvalid.Note(au.clock.Now()); log {
				au.log.Warn("the signer's renewal window ends before it starts; computing one", zap.String("event", "renewal_info_invalid"),
					zap.String("profile", au.cfg.Profile), zap.String("serial", c.Serial),
					zap.Int("requests", n), zap.Duration("interval", RenewalLogEvery))
			}
		case !errors.Is(err, signer.ErrNoRenewalInfo):
			if log, n := au.renewalFailed.Note(au.clock.Now()); log {
				au.log.Warn("the signer has no renewal window now; computing one", zap.String("event", "renewal_info_failed"),
					zap.String("profile", au.cfg.Profile), zap.String("serial", c.Serial), zap.Error(err),
					zap.Int("requests", n), zap.Duration("interval", RenewalLogEvery))
			}
			// A stand-in for the backend's window, which may differ (an
			// incident's early renewal): held briefly, not for the
			// profile's hours, so that clients see the real one soon.
			w := ComputedWindow(c.NotBefore, c.NotAfter, cfg.Point)
			w.RetryAfter = min(cfg.RetryAfter, StandInRenewalRetryAfter)
			return w
		}
	}
	return ComputedWindow(c.NotBefore, c.NotAfter, cfg.Point)
}

// RenewalLogEvery spaces the log lines of a signer whose renewal window
// cannot be had (renewal_info_failed, renewal_info_invalid): renewalInfo
// is an unauthenticated GET that a client may repeat at will.
const RenewalLogEvery = time.Minute

// StandInRenewalRetryAfter is how long a computed window that stands in
// for a signer's unreachable one holds: what a client is told to wait
// before it asks again (RFC 9773 suggests clients wait at least a minute).
const StandInRenewalRetryAfter = 5 * time.Minute

// pastWindow is a window that asks for renewal now, as of at.
func pastWindow(at time.Time, explanationURL string) signer.RenewalInfo {
	start := at.Add(-pastWindowStart).Truncate(time.Second)
	return signer.RenewalInfo{Start: start, End: start.Add(pastWindowLength), ExplanationURL: explanationURL}
}

// ComputedWindow is the window of a certificate valid from notBefore to
// notAfter: centred at point (a fraction) of its lifetime, spanning 1% of
// the lifetime on either side, in whole seconds, never ending before it
// starts.
func ComputedWindow(notBefore, notAfter time.Time, point float64) signer.RenewalInfo {
	if point <= 0 || point >= 1 {
		point = DefaultRenewalPoint
	}
	life := notAfter.Sub(notBefore)
	centre := notBefore.Add(time.Duration(float64(life) * point))
	spread := life / renewalSpread
	start := centre.Add(-spread).Truncate(time.Second)
	end := centre.Add(spread).Truncate(time.Second)
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	return signer.RenewalInfo{Start: start, End: end}
}

// replacedCertificate checks newOrder's "replaces" (RFC 9773 §5), as
// Boulder does: a malformed certID is malformed; one naming no
// certificate of this profile is NotFound; another account's certificate
// is unauthorized; one sharing no identifier with the order is
// malformed. It returns the certificate, its leaf and its chain.
func (au *Authority) replacedCertificate(ctx context.Context, accountID, certID string, idents []acme.Identifier) (store.Certificate, *x509.Certificate, [][]byte, error) {
	id, err := ParseCertID(certID)
	if err != nil {
		return store.Certificate{}, nil, nil, err
	}
	c, leaf, chain, err := au.certificateOf(ctx, id)
	if err != nil {
		return store.Certificate{}, nil, nil, err
	}
	if c.AccountID != accountID {
		return store.Certificate{}, nil, nil, problem.UnauthorizedF("the certificate this order replaces was issued to another account")
	}
	old, err := au.db.GetOrder(ctx, au.cfg.Profile, c.OrderID)
	if err != nil {
		return store.Certificate{}, nil, nil, err
	}
	for _, a := range old.Identifiers {
		for _, b := range idents {
			if a == b {
				return c, leaf, chain, nil
			}
		}
	}
	return store.Certificate{}, nil, nil, problem.MalformedF("the order shares no identifier with the certificate it replaces")
}

// Replacement is newOrder's "replaces" as the authority read it, once per
// request: the certificate it names, whether the order may replace it
// (as CreateOrder checks it), and whether its renewal window has begun.
type Replacement struct {
	certID   string // the certID the client sent
	storedID string // the certificate's id in the store; "" when the order only echoes certID
	inWindow bool
	err      error // why the order may not replace it; CreateOrder answers it
}

// Replaces reads the certificate certID of newOrder's "replaces" for an
// order of the account for idents; nil for none.
//
// This server refuses a replacement only of a certificate already
// replaced by a finalized order (RFC 9773 §5 says it SHOULD refuse one
// replaced by any order that is not invalid). A certificate whose
// replacement is live but not finalized (a renewal its client abandoned,
// or still validating) is not refused: the order goes ahead and, since
// the server accepted a newOrder with "replaces", echoes it (§5: it
// MUST), but it is not the certificate's replacement (no stored id
// here), so it is neither refused nor exempt from the limits, and one
// live replacement a certificate is all the exemption ever covers. A
// finalized replacement is answered alreadyReplaced by CreateOrder.
func (au *Authority) Replaces(ctx context.Context, accountID, certID string, idents []acme.Identifier) *Replacement {
	if certID == "" {
		return nil
	}
	c, leaf, chain, err := au.replacedCertificate(ctx, accountID, certID, idents)
	if err != nil {
		return &Replacement{certID: certID, err: err}
	}
	live, finalized, earlier, err := au.db.ReplacementOf(ctx, c.ID, au.clock.Now())
	switch {
	case err != nil:
		return &Replacement{certID: certID, err: err}
	case live && !finalized:
		return &Replacement{certID: certID}
	case earlier && !live:
		// A replacement abandoned before (invalid, or expired): this
		// order replaces the certificate, but is counted as any other,
		// or a loop of renewals abandoned would be orders without limit.
		return &Replacement{certID: certID, storedID: c.ID}
	}
	info := au.renewalWindow(ctx, c, leaf, chain, au.cfg.Renewal.withDefaults())
	return &Replacement{certID: certID, storedID: c.ID, inWindow: !au.clock.Now().Before(info.Start)}
}

// InsideItsWindow says whether r names a certificate the account may
// replace with the order whose renewal window has begun, and that no
// order replaced before: such a renewal is what the CA asked for, so the
// order and duplicate limits do not count it; one after an abandoned
// replacement they do. Anything that could not be read says no; CreateOrder then
// answers the real problem.
func (r *Replacement) InsideItsWindow() bool { return r != nil && r.err == nil && r.inWindow }
