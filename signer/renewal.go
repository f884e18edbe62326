package signer

import (
	"context"
	"crypto/x509"
	"errors"
	"time"
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
