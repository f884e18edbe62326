package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Preparing the upstream order (Options.PrepareUpstream).
//
// With it on, a new local order starts a relay_prepare job at once: it
// places the upstream order and answers the upstream's challenges while
// the client proves its names here, so that the finalize only posts the
// CSR upstream and fetches the certificate. It never finalizes upstream:
// only the relay_issue job does, after the client's order is ready and
// its CSR checked (Issue). As soon as the upstream order exists, a
// durable relay_prepared job records its URL, due when the local order
// expires: the finalize's Issue hands that URL to the relay, and the job,
// when it comes due, deactivates the upstream authorizations of an upstream
// order no finalize took (RFC 8555 §7.5.2), so that nothing can be issued
// from it. An upstream order placed by an attempt that died before its
// relay_prepared job was stored is never finalized either; it expires
// upstream.
const (
	PrepareKind  = "relay_prepare"
	PreparedKind = "relay_prepared"
)

// preparedPayload is a relay_prepared job's payload.
type preparedPayload struct {
	Profile  string `json:"profile"`
	Order    string `json:"order"`
	Upstream string `json:"upstream_order"`
}

// Bounds of the preparation.
const (
	// prepareWait is how long PrepareOrder's goroutine waits for the
	// first attempt of the preparation, which a finalize of the same order
	// in this process waits for (up to FinalizeWait) so that it relays the
	// prepared upstream order rather than placing another.
	prepareWait = time.Minute
	// preparedGrace is how long after the local order's expiry the
	// relay_prepared job may still deactivate the upstream order.
	preparedGrace = time.Hour
	// finalizeRace is how long the relay_prepared job waits again when
	// it finds the local order claimed by a finalize whose relay is not
	// mapped yet.
	finalizeRace = time.Minute
)

// PrepareOrder implements signer.OrderPreparer: with PrepareUpstream on,
// it starts the order's relay_prepare job, in this process when a runner
// here has room, without waiting for it.
func (s *Signer) PrepareOrder(ctx context.Context, orderID string, expires time.Time) {
	if !s.opts.PrepareUpstream {
		return
	}
	b, log, err := s.binding()
	if err != nil {
		return
	}
	done := make(chan struct{})
	s.mu.Lock()
	if s.preparing == nil {
		s.preparing = map[string]chan struct{}{}
	}
	s.preparing[orderID] = done
	s.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.preparing, orderID)
			s.mu.Unlock()
			close(done)
		}()
		spec := jobs.Spec{
			Kind: PrepareKind, Key: orderID, Lane: signer.SigningLane(b.Profile),
			Payload:  issuePayload{Profile: b.Profile, Order: orderID},
			Deadline: expires, MaxAttempts: s.opts.MaxAttempts,
		}
		if _, _, err := b.Queue.RunNow(ctx, spec, prepareWait); err != nil {
			log.Warn("preparing the upstream order", zap.String("event", "relay_prepare_failed"),
				zap.String("profile", b.Profile), zap.String("order", orderID), zap.Error(err))
		}
	}()
}

// awaitPreparation waits, up to d, for this process's preparation of
// orderID, if one is under way.
func (s *Signer) awaitPreparation(ctx context.Context, orderID string, d time.Duration) {
	s.mu.Lock()
	done, ok := s.preparing[orderID]
	s.mu.Unlock()
	if !ok || d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// preparedUpstream is the upstream order prepared for orderID, "" for none.
func (s *Signer) preparedUpstream(ctx context.Context, q *jobs.Queue, orderID string) (string, error) {
	js, err := q.List(ctx, store.JobFilter{Kind: PreparedKind, Key: orderID, Limit: 1})
	if err != nil || len(js) == 0 || js[0].Status != store.JobReady {
		return "", err
	}
	var p preparedPayload
	if err := jobs.Decode(&js[0], &p); err != nil {
		return "", err
	}
	return p.Upstream, nil
}

// runPrepare does one attempt of a relay_prepare job: place the upstream
// order (once: its relay_prepared job is stored before anything else
// happens) and answer its challenges. It stops at a ready upstream order.
func (s *Signer) runPrepare(ctx context.Context, job *jobs.Job) jobs.Outcome {
	var p issuePayload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	b, log, err := s.binding()
	if err != nil {
		return jobs.RetryAfter(err.Error(), 30*time.Second)
	}
	if wait := s.coolingDown(); wait > 0 {
		return jobs.RetryAfter(fmt.Sprintf("the upstream rate-limited this profile; waiting %s", wait.Round(time.Second)), wait)
	}
	o, err := b.DB.GetOrder(ctx, b.Profile, p.Order)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Done()
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	if (o.Status != acme.StatusPending && o.Status != acme.StatusReady) || !s.clock.Now().Before(o.Expires) {
		// Finalized (the relay carries on from here) or over: nothing to
		// prepare.
		return jobs.Done()
	}
	actx, cancel := context.WithTimeout(ctx, s.opts.AttemptTimeout)
	defer cancel()
	rec := &recorder{base: s.transport, now: s.clock.Now}
	actx = withRecorder(actx, rec)
	if err := s.prepare(actx, b, log, o); err != nil {
		if ctx.Err() != nil {
			return jobs.RetryAfter("interrupted: "+err.Error(), 0)
		}
		f := classify(err, rec.lastResponse())
		if f.forgetAccount {
			s.forgetAccount(ctx, b.Profile)
		}
		if f.verdict == coolDown {
			s.coolDown(f.after)
		}
		log.Warn("preparing the upstream order failed", zap.String("event", "relay_prepare_attempt_failed"),
			zap.String("profile", b.Profile), zap.String("order", o.ID), zap.Stringer("verdict", f.verdict),
			zap.String("reason", f.reason))
		// The finalize relays without what is not prepared: a failure
		// here costs the order nothing.
		return outcomeFor(f, "upstream "+s.opts.Directory+": "+f.reason)
	}
	return jobs.Done()
}

func (s *Signer) prepare(ctx context.Context, b *signer.Binding, log *zap.Logger, o store.Order) error {
	c := s.upstream
	acct, err := s.account(ctx, c, b.Profile)
	if err != nil {
		return err
	}
	url, err := s.preparedUpstream(ctx, b.Queue, o.ID)
	if err != nil {
		return err
	}
	var order acme.Order
	if url == "" {
		ro := store.RelayOrder{OrderID: o.ID, Identifiers: o.Identifiers, NotBefore: o.NotBefore, NotAfter: o.NotAfter,
			CertificateProfile: o.CertificateProfile, Replaces: o.Replaces}
		want, err := s.orderRequest(ctx, c, b, ro)
		if err != nil {
			return err
		}
		if order, err = s.placeOrder(ctx, c, acct, b, log, ro, want); err != nil {
			return err
		}
		// Recorded durably before anything else: from here the upstream
		// order is either relayed or deactivated.
		if _, _, err := b.Queue.Enqueue(ctx, jobs.Spec{
			Kind: PreparedKind, Key: o.ID, Lane: signer.SigningLane(b.Profile),
			Payload: preparedPayload{Profile: b.Profile, Order: o.ID, Upstream: order.Location},
			RunAt:   o.Expires, Deadline: o.Expires.Add(preparedGrace), MaxAttempts: s.opts.MaxAttempts,
		}); err != nil {
			return fmt.Errorf("recording the prepared upstream order: %w", err)
		}
		log.Info("upstream order prepared", zap.String("event", "relay_upstream_prepared"), zap.String("profile", b.Profile),
			zap.String("order", o.ID), zap.String("upstream_order", order.Location))
	} else if order, err = c.GetOrder(ctx, acct, acme.Order{Location: url}); err != nil {
		return err
	}
	switch order.Status {
	case acme.StatusPending:
		return s.authorize(ctx, c, recorderOf(ctx), acct, order, o.ID)
	case acme.StatusReady, acme.StatusProcessing, acme.StatusValid:
		return nil
	}
	return permanent("the prepared upstream order %s is %s", order.Location, order.Status)
}

// runPrepared does one attempt of a relay_prepared job, due when the
// local order expires: an upstream order that no finalize took is
// deactivated.
func (s *Signer) runPrepared(ctx context.Context, job *jobs.Job) jobs.Outcome {
	var p preparedPayload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	b, log, err := s.binding()
	if err != nil {
		return jobs.RetryAfter(err.Error(), 30*time.Second)
	}
	ro, err := b.DB.GetRelayOrder(ctx, p.Order)
	switch {
	case err == nil && ro.UpstreamOrderURL == p.Upstream:
		return jobs.Done() // relayed: the upstream order is the relay's
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return jobs.Retry(err.Error())
	}
	o, err := b.DB.GetOrder(ctx, b.Profile, p.Order)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The local order is gone (retention): nothing will relay it.
	case err != nil:
		return jobs.Retry(err.Error())
	case o.Status == acme.StatusProcessing && ro.OrderID == "":
		// Claimed by a finalize that has not mapped its relay yet.
		return jobs.RetryAfter("the order is being finalized", finalizeRace)
	case (o.Status == acme.StatusPending || o.Status == acme.StatusReady) && s.clock.Now().Before(o.Expires):
		return jobs.RetryAfter("the order may still be finalized", o.Expires.Sub(s.clock.Now()))
	}
	actx, cancel := context.WithTimeout(ctx, s.opts.AttemptTimeout)
	defer cancel()
	rec := &recorder{base: s.transport, now: s.clock.Now}
	actx = withRecorder(actx, rec)
	n, err := s.deactivate(actx, b, p.Upstream)
	if err != nil {
		if ctx.Err() != nil {
			return jobs.RetryAfter("interrupted: "+err.Error(), 0)
		}
		f := classify(err, rec.lastResponse())
		return outcomeFor(f, "upstream "+s.opts.Directory+": deactivating "+p.Upstream+": "+f.reason)
	}
	log.Info("prepared upstream order abandoned", zap.String("event", "relay_prepared_abandoned"),
		zap.String("profile", b.Profile), zap.String("order", p.Order), zap.String("upstream_order", p.Upstream),
		zap.Int("deactivated", n))
	return jobs.Done()
}

// deactivate deactivates every authorization of the upstream order at url
// that could still serve it (pending or valid), and returns how many.
func (s *Signer) deactivate(ctx context.Context, b *signer.Binding, url string) (int, error) {
	c := s.upstream
	acct, err := s.account(ctx, c, b.Profile)
	if err != nil {
		return 0, err
	}
	order, err := c.GetOrder(ctx, acct, acme.Order{Location: url})
	if err != nil {
		return 0, err
	}
	if order.Status == acme.StatusInvalid || order.Status == acme.StatusValid || order.Status == acme.StatusProcessing {
		return 0, nil
	}
	n := 0
	for _, u := range order.Authorizations {
		authz, err := c.GetAuthorization(ctx, acct, u)
		if err != nil {
			return n, fmt.Errorf("reading an upstream authorization: %w", err)
		}
		if authz.Status != acme.StatusPending && authz.Status != acme.StatusValid {
			continue
		}
		if _, err := c.DeactivateAuthorization(ctx, acct, u); err != nil {
			return n, fmt.Errorf("deactivating the upstream authorization for %s: %w", authz.IdentifierValue(), err)
		}
		n++
	}
	return n, nil
}

// recorderOf is the recorder an attempt's context carries.
func recorderOf(ctx context.Context) *recorder {
	rec, _ := ctx.Value(recorderKey{}).(*recorder)
	return rec
}
