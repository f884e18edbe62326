package script

import (
	"context"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// runningWait is the expected wait while an attempt runs the program: it
// may be done at any moment, its timeout only bounds it, and the wait
// after a failed run is known once the job is rescheduled.
const runningWait = time.Second

// ExpectedWait implements signer.WaitEstimator, from the order's
// script_issue job: while an attempt runs the program (in any process),
// a short wait; while the job waits for its next attempt (an exit 75's
// backoff, a failed run's), the time until then. No estimate when the job
// is due; idle when it is settled or missing.
func (s *Signer) ExpectedWait(ctx context.Context, orderID string) signer.Wait {
	b, _, err := s.binding()
	if err != nil {
		return signer.Wait{}
	}
	return signer.JobWait(ctx, b.Queue, IssueKind, orderID, s.opts.Clock.Now(), runningWait)
}

var _ signer.WaitEstimator = (*Signer)(nil)
