package authority

import (
	"context"
	"time"

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
// order o again: the signer's estimate (signer.WaitEstimator) rounded up
// to whole seconds, else a second.
func (au *Authority) ProcessingRetryAfter(ctx context.Context, o store.Order) time.Duration {
	e, ok := au.signer.(signer.WaitEstimator)
	if !ok {
		return minProcessingRetryAfter
	}
	d, ok := e.ExpectedWait(ctx, o.ID)
	if !ok {
		return minProcessingRetryAfter
	}
	d = (d + time.Second - 1).Truncate(time.Second)
	return min(max(d, minProcessingRetryAfter), maxProcessingRetryAfter)
}
