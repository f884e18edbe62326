package relay

import (
	"context"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// noteLook records when this process's attempt at relaying an order will
// next read the upstream: the wait it is in (see poller).
func (s *Signer) noteLook(orderID string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nextLook == nil {
		s.nextLook = map[string]time.Time{}
	}
	s.nextLook[orderID] = s.clock.Now().Add(d)
}

func (s *Signer) forgetLook(orderID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nextLook, orderID)
}

// ExpectedWait implements signer.WaitEstimator: how long until the relay
// of an order looks at the upstream again — the wait an attempt in this
// process is in (as the upstream asked, or its backoff), or else the time
// its job waits for its next attempt (a retry's backoff, the upstream's
// Retry-After, a rate limit's cool-down). No estimate while an attempt is
// busy with the upstream, or when the job runs elsewhere and is due; idle
// when the job is settled or missing.
func (s *Signer) ExpectedWait(ctx context.Context, orderID string) signer.Wait {
	now := s.clock.Now()
	s.mu.Lock()
	next, ok := s.nextLook[orderID]
	s.mu.Unlock()
	if ok && next.After(now) {
		return signer.Wait{For: next.Sub(now), Known: true}
	}
	b, _, err := s.binding()
	if err != nil {
		return signer.Wait{}
	}
	return signer.JobWait(ctx, b.Queue, IssueKind, orderID, now, 0)
}
