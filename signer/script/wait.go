package script

import (
	"context"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// runningWait is the expected wait while an attempt runs the program: it
// may be done at any moment, its timeout only bounds it, and the wait
// after a failed run is known once the job is rescheduled.
const runningWait = time.Second

// ExpectedWait implements signer.WaitEstimator, from the order's
// script_issue job: while an attempt runs the program (in any process),
// a short wait; while the job waits for its next attempt (an exit 75's
// backoff, a failed run's), the time until then. No estimate when the job
// is due, settled or missing.
func (s *Signer) ExpectedWait(ctx context.Context, orderID string) (time.Duration, bool) {
	b, _, err := s.binding()
	if err != nil {
		return 0, false
	}
	js, err := b.Queue.List(ctx, store.JobFilter{Kind: IssueKind, Key: orderID, Limit: 1})
	if err != nil || len(js) == 0 {
		return 0, false
	}
	now := s.opts.Clock.Now()
	switch j := js[0]; {
	case j.Status == store.JobRunning:
		return runningWait, true
	case j.Status == store.JobReady && j.RunAt.After(now):
		return j.RunAt.Sub(now), true
	}
	return 0, false
}

var _ signer.WaitEstimator = (*Signer)(nil)
