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
// signTimeout so a slow but live finalize is never signed twice. It is the
// last resort: an order whose claimer is known to have exited (a process
// of this host, see ResumeOrphanedOrders) is resumed at once.
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
	stuck, err := au.db.ReclaimStuckOrders(ctx, au.cfg.Profile, now.Add(-StuckAfter), now, 100, signer.IssueKind, au.claimer())
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

// ResumeOrphanedOrders finishes, as ResumeStuckOrders does and however
// recently they were claimed, the orders of the profile left processing by
// the process incarnations in exited, which the caller knows have exited
// (incarnation.Registry.Exited): a finalize cut by a crash is finished by
// the restarted process at once, within the minute and a half a client
// such as certbot waits, rather than StuckAfter later. An order claimed by
// a process still running is never among them. It returns how many it
// resumed.
func (au *Authority) ResumeOrphanedOrders(ctx context.Context, exited []string) (int, error) {
	var n int
	var errs []error
	for _, dead := range exited {
		for {
			orphans, err := au.db.ReclaimOrdersClaimedBy(ctx, au.cfg.Profile, dead, au.clock.Now(), 100, signer.IssueKind, au.claimer())
			if err != nil {
				return n, errors.Join(append(errs, err)...)
			}
			for _, o := range orphans {
				au.log.Info("resuming an order whose claimer has exited", zap.String("event", "order_resumed"),
					zap.String("profile", au.cfg.Profile), zap.String("order", o.ID), zap.String("claimer", dead))
				if err := au.signStored(ctx, o); err != nil {
					if _, verdict := problem.As(err); !verdict {
						errs = append(errs, fmt.Errorf("order %s: %w", o.ID, err))
					}
				}
			}
			n += len(orphans)
			if len(orphans) < 100 || ctx.Err() != nil {
				break
			}
		}
	}
	return n, errors.Join(errs...)
}

// claimer is the id recorded with this process's claims, "" for none.
func (au *Authority) claimer() string {
	if au.incarn == nil {
		return ""
	}
	return au.incarn.Self()
}
