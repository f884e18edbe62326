package relay

import (
	"context"
	"fmt"
	"time"
)

// poller paces the reads of one upstream resource that is still in
// progress (an authorization being validated, an order being issued): the
// upstream's Retry-After when it sends one, else a wait that starts at the
// signer's PollInterval and doubles up to its MaxPoll, so that a quick
// upstream is seen quickly and a slow one is not flooded. budget bounds
// the waiting of one attempt; past it the attempt ends and the job's
// backoff (or the recorded Retry-After) takes over.
type poller struct {
	next, max time.Duration
	budget    time.Duration
	waited    time.Duration
	// note, if set, is told each wait (for the client's Retry-After).
	note func(time.Duration)
}

// poller paces the reads of a resource of the relay of order orderID.
func (s *Signer) poller(budget time.Duration, orderID string) *poller {
	return &poller{next: s.opts.PollInterval, max: s.opts.MaxPoll, budget: budget,
		note: func(d time.Duration) { s.noteLook(orderID, d) }}
}

// wait returns how long to wait before the next read, given the
// upstream's Retry-After (0: none), or an error when that would exceed
// the budget.
func (p *poller) wait(retryAfter time.Duration) (time.Duration, error) {
	d := retryAfter
	if d <= 0 {
		d = p.next
		p.next = min(2*p.next, p.max)
	}
	if p.waited+d > p.budget {
		return 0, fmt.Errorf("still in progress after %s; the upstream asks to come back in %s", p.waited.Round(time.Millisecond), d)
	}
	p.waited += d
	if p.note != nil {
		p.note(d)
	}
	return d, nil
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
