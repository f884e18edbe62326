package relay

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mholt/acmez/v3/acme"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Renewal information (RFC 9773) of relayed certificates: the upstream
// decides when they should be renewed, so its window is theirs.

const (
	// ariTimeout bounds one upstream renewalInfo read (acmez tries a
	// failing or malformed answer three times, seconds apart): it runs
	// inside a client's GET.
	ariTimeout = 15 * time.Second
	// ariDefaultHold is how long an upstream window is kept when the
	// upstream sends no Retry-After (RFC 9773 §4.3's few times a day).
	ariDefaultHold = 6 * time.Hour
	// ariUnsupportedHold is how long an upstream without renewalInfo in
	// its directory is not asked again; ariFailureHold, one that failed.
	ariUnsupportedHold = time.Hour
	ariFailureHold     = time.Minute
	// ariMinHold and ariMaxHold bound how long an upstream window is
	// kept, whatever the upstream's Retry-After: RFC 9773 §4.3.2 has a
	// client treat less than a minute as a minute and more than a day
	// as a day. A day is also the most a client of ours is told to wait.
	ariMinHold = time.Minute
	ariMaxHold = 24 * time.Hour
	// ariPruneAt is the cache size from which a store drops the expired
	// entries.
	ariPruneAt = 256
)

// ariCache holds the upstream's answers per certID until they expire.
type ariCache struct {
	mu      sync.Mutex
	entries map[string]ariEntry
}

// ariEntry is one upstream answer: a window or an error, held until.
type ariEntry struct {
	info  signer.RenewalInfo
	err   error
	until time.Time
}

func (c *ariCache) get(certID string, now time.Time) (ariEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[certID]
	if !ok || !now.Before(e.until) {
		return ariEntry{}, false
	}
	return e, true
}

func (c *ariCache) put(certID string, e ariEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]ariEntry{}
	}
	if len(c.entries) >= ariPruneAt {
		for k, old := range c.entries {
			if !now.Before(old.until) {
				delete(c.entries, k)
			}
		}
	}
	c.entries[certID] = e
}

// RenewalInfo implements signer.RenewalInfoSource: the upstream's window
// for leaf, which the upstream issued, read through acmez and kept until
// the upstream's Retry-After. The answer's RetryAfter is what is left of
// that. An upstream whose directory has no renewalInfo answers
// signer.ErrNoRenewalInfo.
func (s *Signer) RenewalInfo(ctx context.Context, leaf *x509.Certificate, _ [][]byte) (signer.RenewalInfo, error) {
	// The certID the upstream knows the certificate by, from its AKI
	// and serial: the same one the client asked about.
	certID, err := acme.ARIUniqueIdentifier(leaf)
	if err != nil {
		return signer.RenewalInfo{}, fmt.Errorf("relay: the certificate's certID: %w", err)
	}
	e, ok := s.ari.get(certID, s.clock.Now())
	if !ok {
		e = s.upstreamRenewalInfo(ctx, leaf)
		if e.err != nil && ctx.Err() != nil {
			// The client went away: nothing learnt about the upstream.
			return signer.RenewalInfo{}, e.err
		}
		s.ari.put(certID, e, s.clock.Now())
	}
	if e.err != nil {
		return signer.RenewalInfo{}, e.err
	}
	info := e.info
	info.RetryAfter = max(e.until.Sub(s.clock.Now()), time.Second)
	return info, nil
}

// upstreamRenewalInfo asks the upstream for leaf's window.
func (s *Signer) upstreamRenewalInfo(ctx context.Context, leaf *x509.Certificate) ariEntry {
	ctx, cancel := context.WithTimeout(ctx, ariTimeout)
	defer cancel()
	rec := &recorder{base: s.transport, now: s.clock.Now}
	c := s.client(rec)
	// acmez decides from its process-wide copy of the directory; the
	// signer's own read of it says first (directory.go).
	o, err := s.offer(ctx, c)
	if err != nil {
		return ariEntry{err: s.secrets.err(fmt.Errorf("relay: renewal information from %s: %w", s.secrets.directory, err)), until: s.clock.Now().Add(ariFailureHold)}
	}
	if !o.renewalInfo {
		return ariEntry{err: signer.ErrNoRenewalInfo, until: s.clock.Now().Add(ariUnsupportedHold)}
	}
	ari, err := c.GetRenewalInfo(ctx, leaf)
	now := s.clock.Now()
	switch {
	case errors.Is(err, acme.ErrUnsupported):
		return ariEntry{err: signer.ErrNoRenewalInfo, until: now.Add(ariUnsupportedHold)}
	case err != nil:
		return ariEntry{err: s.secrets.err(fmt.Errorf("relay: renewal information from %s: %w", s.secrets.directory, err)), until: now.Add(ariFailureHold)}
	}
	// The Retry-After of the renewalInfo answer, the last the recorder
	// saw, read here rather than from acmez's ari.RetryAfter: acmez
	// reads it against the wall clock, and wraps round a delay too large
	// for a time.Duration to a past instant.
	hold := ariDefaultHold
	if last := rec.lastResponse(); last.retryAfterSet {
		hold = min(max(last.retryAfter, ariMinHold), ariMaxHold)
	}
	// The window is passed on; an explanation URL that is no plain web
	// page (signer.CheckExplanationURL) is not: the clients' operators
	// would be shown it.
	explanation := ari.ExplanationURL
	if signer.CheckExplanationURL(explanation) != nil {
		explanation = ""
	}
	return ariEntry{
		info: signer.RenewalInfo{Start: ari.SuggestedWindow.Start, End: ari.SuggestedWindow.End, ExplanationURL: explanation},
		// The answer holds from when it was asked for, the clock the
		// cache reads.
		until: now.Add(hold),
	}
}

var _ signer.RenewalInfoSource = (*Signer)(nil)
