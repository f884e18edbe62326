package signer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
)

// RenewalInfo is a certificate's suggested renewal window (RFC 9773 §4.2).
type RenewalInfo struct {
	// Start and End bound the window; End is after Start.
	Start, End time.Time
	// ExplanationURL, when set, is a page that says why the window is
	// where it is (an incident, a CA rotation).
	ExplanationURL string
	// RetryAfter is how long the answer holds before a client should ask
	// again; 0 for the profile's default.
	RetryAfter time.Duration
}

// MaxExplanationURL bounds an explanation URL: it is stored with every
// certificate an operator renews early and sent in every renewalInfo
// answer about them.
const MaxExplanationURL = 1024

// CheckExplanationURL says whether u may be a renewal window's
// explanation URL: an absolute http(s) URL without credentials, of at
// most MaxExplanationURL bytes. Clients show it to their operators, so
// neither an operator's typo nor an upstream CA's answer reaches them as
// a javascript: or data: link, a page behind a password, or a megabyte.
//
// The error quotes u by its start, and never its credentials: it ends up
// in an operator's answer and in a log line. A user name may be a token
// as much as a password is, so neither is quoted; a URL that does not
// parse is not quoted at all, since what of it is a credential cannot be
// told.
func CheckExplanationURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("is not a URL (%s; not quoted, as it may hold credentials): it must be an absolute http(s) URL of at most %d bytes, without credentials",
			textcut.Clip(urlFault(err), 128, "…"), MaxExplanationURL)
	}
	if p.User != nil {
		shown := *p
		shown.User = nil
		return fmt.Errorf("%q must be an absolute http(s) URL without credentials (given with a user name or password, not quoted)",
			textcut.Clip(shown.String(), 128, "…"))
	}
	if (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" || len(u) > MaxExplanationURL {
		return fmt.Errorf("%q must be an absolute http(s) URL of at most %d bytes, without credentials", textcut.Clip(u, 128, "…"), MaxExplanationURL)
	}
	return nil
}

// urlFault is what url.Parse found wrong, without the URL it quotes.
func urlFault(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "it does not parse"
}

// RenewalInfoSource is implemented by signers whose backend decides when
// its certificates should be renewed (a relay passes on the upstream CA's
// renewalInfo). The ACME layer asks it for each renewalInfo request about
// a certificate that is neither revoked nor asked by an operator to renew
// early; without it, or when it answers ErrNoRenewalInfo, the ACME layer
// computes the window from the certificate's validity itself.
//
// RenewalInfo MUST honour ctx's cancellation and SHOULD answer from a
// cache within the RetryAfter of its last answer: it runs inside an
// unauthenticated GET. leaf is the certificate as issued; chain holds it
// and its issuers (DER), as the signer returned them.
type RenewalInfoSource interface {
	RenewalInfo(ctx context.Context, leaf *x509.Certificate, chain [][]byte) (RenewalInfo, error)
}

// ErrNoRenewalInfo is what a RenewalInfoSource answers when its backend
// offers no window for a certificate (an upstream CA without ARI): the
// ACME layer then computes one. Any other error is a fault, logged, and
// also answered with the computed window.
var ErrNoRenewalInfo = errors.New("signer: no renewal information for this certificate")
