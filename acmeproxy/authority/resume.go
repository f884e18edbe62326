package authority

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Finalize gives the signer signTimeout to answer; an order processing for
// longer than StuckAfter with no answer recorded was claimed by a process
// that died, and is resumed by ResumeStuckOrders. StuckAfter is well above
// signTimeout so a slow but live finalize is never signed twice.
const (
	signTimeout = time.Minute
	StuckAfter  = 5 * time.Minute
)

// ResumeEvery is how often the resume sweep (ResumeStuckOrders) runs: an
// order stuck for StuckAfter is resumed by the next sweep, at most
// ResumeEvery later.
const ResumeEvery = time.Minute

// ResumeStuckOrders finishes orders a crash, or a fault on our side, left
// in processing: it re-applies the profile's current policy (a config
// reload may have denied a name since; such an order fails), then hands
// each back to the signer with the CSR stored at claim time. A signer that
// answers Pending treats the repeat as a no-op (its own job is keyed by the
// order), so this is safe for every signer. It returns how many it resumed.
func (au *Authority) ResumeStuckOrders(ctx context.Context) (int, error) {
	now := au.clock.Now()
	// An order a worker's signer_issue job will sign is not stuck, however
	// long the job waits for a worker: resuming it beside the job would
	// sign it twice where the worker holds the signer.
	stuck, err := au.db.ReclaimStuckOrders(ctx, au.cfg.Profile, now.Add(-StuckAfter), now, 100, signer.IssueKind)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, o := range stuck {
		// Not always a crash: a front end's order waits here as long as
		// no worker runs its signer's job, and a relay's as long as its
		// upstream takes; handing it back is a no-op then.
		au.log.Info("resuming an order processing for longer than "+StuckAfter.String()+" without an answer", zap.String("event", "order_resumed"),
			zap.String("profile", au.cfg.Profile), zap.String("order", o.ID))
		if err := au.signStored(ctx, o); err != nil {
			if _, verdict := problem.As(err); !verdict {
				errs = append(errs, fmt.Errorf("order %s: %w", o.ID, err))
			}
		}
	}
	return len(stuck), errors.Join(errs...)
}
