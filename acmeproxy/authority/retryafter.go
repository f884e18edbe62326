package authority

import (
	"context"
	"slices"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Bounds of the Retry-After of a processing order, in whole seconds (RFC
// 9110 §10.2.3): at least one, since some clients poll at once on zero;
// at most maxProcessingRetryAfter, so that a client is never sent away
// for longer than a wrong estimate should cost.
const (
	minProcessingRetryAfter = time.Second
	maxProcessingRetryAfter = 10 * time.Minute
)

// ProcessingRetryAfter is when a client should look at the processing
// order o again, rounded up to whole seconds:
//   - the signer's estimate (signer.WaitEstimator), or the wait of the
//     order's signer_issue job for its next attempt where the order is
//     handed to an instance holding the signer;
//   - a second while work on the order is under way or due, or may be
//     (a finalize or a resume gives the signer up to signTimeout), or
//     when nothing can tell;
//   - when no work on the order is live (the signer signs within the
//     request, as the local CA does, or its job is settled or lost) and
//     the order, read again, is still processing, the time until the
//     resume sweep hands the order to the signer again; at most
//     ResumeEvery where its claimer is a process this one knows has
//     exited, whose orders this one resumes every ResumeEvery.
func (au *Authority) ProcessingRetryAfter(ctx context.Context, o store.Order) time.Duration {
	now := au.clock.Now()
	var w signer.Wait
	if e, ok := au.signer.(signer.WaitEstimator); ok {
		w = e.ExpectedWait(ctx, o.ID)
	} else if !au.Delegates() {
		// It signs within the finalize (or resume) that calls it.
		w.Idle = true
	}
	if w.Idle || au.Delegates() {
		// The handover to an instance holding the signer is work on the
		// order too, and keeps the resume sweep away from it.
		if jw := signer.JobWait(ctx, au.queue, signer.IssueKind, o.ID, now, 0); !jw.Idle {
			w = jw
		}
	}
	switch {
	case w.Known:
		return retryAfterOf(w.For)
	case !w.Idle || now.Sub(o.UpdatedAt) < signTimeout:
		return minProcessingRetryAfter
	}
	// o was read before the work was looked at: work that settled the
	// order in between (a signer records the certificate, then settles its
	// job) looks idle too. Only the order read again tells the two apart;
	// the client is not sent away until the sweep for an order that is
	// done already.
	cur, err := au.db.GetOrder(ctx, au.cfg.Profile, o.ID)
	if err != nil || cur.Status != acme.StatusProcessing {
		return minProcessingRetryAfter
	}
	// The first sweep after the order has been processing for StuckAfter
	// resumes it; one overdue (no sweep ran yet) is resumed by the next.
	d := cur.UpdatedAt.Add(StuckAfter).Sub(now)
	if d <= 0 {
		d = ResumeEvery
	}
	// A claimer this process can tell has exited leaves its orders to this
	// process's next round of resuming them (ResumeOrphanedOrders, every
	// ResumeEvery), which comes sooner than the sweep.
	if d > ResumeEvery && au.claimerExited(cur.ClaimedBy) {
		d = ResumeEvery
	}
	return retryAfterOf(d)
}

// claimerExited reports whether claimer, an order's claimer, is a process
// incarnation this process knows has exited (incarnation.Registry.Exited:
// one of this host, registered beside this one's). This process resumes
// its orders then; one that cannot tell (no registration, a claimer of
// another host) says not.
func (au *Authority) claimerExited(claimer string) bool {
	if claimer == "" || au.incarn == nil || au.incarn.Self() == "" {
		return false
	}
	exited, err := au.incarn.Exited()
	if err != nil {
		return false
	}
	return slices.Contains(exited, claimer)
}

// retryAfterOf is the Retry-After of a wait d: rounded up to whole
// seconds, within the bounds above.
func retryAfterOf(d time.Duration) time.Duration {
	d = (d + time.Second - 1).Truncate(time.Second)
	return min(max(d, minProcessingRetryAfter), maxProcessingRetryAfter)
}
