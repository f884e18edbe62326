package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Preparing the upstream order (Options.PrepareUpstream).
//
// With it on, a new local order starts its preparation at once, in the
// background: it places the upstream order and answers the upstream's
// challenges while the client proves its names here, so that the finalize
// only posts the CSR upstream and fetches the certificate. It never
// finalizes upstream: only the relay_issue job does, after the client's
// order is ready and its CSR checked (Issue). As soon as the upstream
// order exists, a durable relay_prepared job records its URL, due when
// the local order expires: the finalize's Issue hands that URL to the
// relay, and the job, when it comes due, deactivates the upstream
// authorizations of an upstream order no finalize took (RFC 8555 §7.5.2),
// so that nothing can be issued from it.
//
// The preparation itself is no job: a preparation that fails, finds no
// free slot, or dies with its process costs the order nothing, since its
// finalize relays whatever is not prepared (an upstream order placed by a
// preparation that died before its relay_prepared job was stored is never
// finalized; it expires upstream). A relay that starts while its order's
// preparation is still placing the upstream order — in this process or
// in another instance on the database — waits for the preparation and
// relays what it recorded (adoptPrepared, placement.go), so one local
// order gets one upstream order however slowly the upstream answers the
// preparation's newOrder and whichever instance the finalize reaches.
const PreparedKind = "relay_prepared"

// preparedPayload is a relay_prepared job's payload.
type preparedPayload struct {
	Profile  string `json:"profile"`
	Order    string `json:"order"`
	Upstream string `json:"upstream_order"`
}

// Bounds of the preparation.
const (
	// maxPreparing bounds the preparations one signer runs at once; a new
	// order beyond it is not prepared.
	maxPreparing = 16
	// preparedGrace is how long after the local order's expiry the
	// relay_prepared job may still deactivate the upstream order.
	preparedGrace = time.Hour
	// finalizeRace is how long the relay_prepared job waits again when
	// it finds the local order claimed by a finalize whose relay is not
	// mapped yet.
	finalizeRace = time.Minute
)

// PrepareOrder implements signer.OrderPreparer: with PrepareUpstream on,
// it starts preparing the order's upstream order in the background,
// unless maxPreparing preparations are under way or the upstream asked
// this profile to wait.
func (s *Signer) PrepareOrder(ctx context.Context, orderID string, expires time.Time) {
	if !s.opts.PrepareUpstream || s.coolingDownHere() > 0 {
		return
	}
	b, log, err := s.binding()
	if err != nil {
		return
	}
	done := make(chan struct{})
	s.mu.Lock()
	if s.life == nil || s.life.Err() != nil || len(s.preparing) >= maxPreparing {
		s.mu.Unlock()
		return // closed (or built without New), or full
	}
	if s.preparing == nil {
		s.preparing = map[string]chan struct{}{}
	}
	s.preparing[orderID] = done
	s.preparations.Add(1) // under mu, with life checked: Close waits for it
	s.mu.Unlock()
	// Not the request's: the preparation outlives it. The signer's life
	// ends it (Close), as does AttemptTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.AttemptTimeout)
	stopOnClose := context.AfterFunc(s.life, cancel)
	go func() {
		defer func() {
			stopOnClose()
			cancel()
			s.mu.Lock()
			delete(s.preparing, orderID)
			s.mu.Unlock()
			close(done)
			s.preparations.Done()
		}()
		s.runPrepare(ctx, b, log, orderID)
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

// adoptPrepared records as the relay's upstream order the one prepared
// for orderID, and returns the upstream order the relay then carries on
// with; "" when none was prepared, with the claim (placement.go) under
// which the relay places one. A relay whose finalize found no prepared
// order (its wait for the preparation, FinalizeWait, ran out: an
// upstream slow to answer its newOrder) waits first for this process's
// preparation of the order, if one is still under way, for as long as
// the attempt may take; and for another instance's placing it, as long
// as that one's claim holds: placing an order of its own beside it would
// leave two upstream orders for one local order.
func (s *Signer) adoptPrepared(ctx context.Context, b *signer.Binding, orderID string) (string, *placement, error) {
	s.mu.Lock()
	_, preparing := s.preparing[orderID]
	s.mu.Unlock()
	if preparing {
		if s.awaitingPreparation != nil {
			s.awaitingPreparation()
		}
		s.awaitPreparation(ctx, orderID, s.opts.AttemptTimeout)
		if err := ctx.Err(); err != nil {
			return "", nil, fmt.Errorf("waiting for the preparation of the upstream order: %w", err)
		}
	}
	prepared, claim, err := s.awaitPlacement(ctx, b, orderID)
	if err != nil || prepared == "" {
		return "", claim, err
	}
	recorded, err := b.DB.SetRelayUpstreamOrder(ctx, orderID, prepared, s.clock.Now())
	return recorded, nil, err
}

// preparedUpstream is the upstream order prepared for orderID, "" for
// none: the one its placement records, else the one its relay_prepared
// job names.
func (s *Signer) preparedUpstream(ctx context.Context, b *signer.Binding, orderID string) (string, error) {
	p, err := b.DB.GetRelayPlacement(ctx, orderID)
	switch {
	case err == nil && p.Placed():
		return p.UpstreamOrderURL, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", err
	}
	return s.preparedJob(ctx, b, orderID)
}

// preparedJob is the upstream order the relay_prepared job of orderID
// names, "" for none.
func (s *Signer) preparedJob(ctx context.Context, b *signer.Binding, orderID string) (string, error) {
	job, err := b.Queue.Live(ctx, PreparedKind, orderID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var p preparedPayload
	if err := jobs.Decode(&job, &p); err != nil {
		return "", err
	}
	return p.Upstream, nil
}

// runPrepare prepares the upstream order of a local order still pending
// or ready: it places it (once: its relay_prepared job is stored before
// anything else happens) and answers its challenges, up to a ready
// upstream order. A failure is logged; the finalize relays without it.
func (s *Signer) runPrepare(ctx context.Context, b *signer.Binding, log *zap.Logger, orderID string) {
	o, err := b.DB.GetOrder(ctx, b.Profile, orderID)
	if err != nil || (o.Status != acme.StatusPending && o.Status != acme.StatusReady) || !s.clock.Now().Before(o.Expires) {
		return // gone, finalized already, or over: nothing to prepare
	}
	if s.coolingDown(ctx) > 0 {
		return // another instance was rate-limited: the finalize relays it
	}
	rec := &recorder{base: s.transport, now: s.clock.Now}
	if err := s.prepare(withRecorder(ctx, rec), b, log, o); err != nil {
		if s.life.Err() != nil {
			// Closed (its config unloaded): not the upstream's doing,
			// and nothing to tell the account or the cool-down.
			log.Info("preparing the upstream order stopped: the signer was closed", zap.String("event", "relay_prepare_stopped"),
				zap.String("profile", b.Profile), zap.String("order", o.ID), zap.String("reason", s.secrets.reasonOf(err)))
			return
		}
		f := s.secrets.classifyFor(err, rec.lastResponse(), o.Identifiers)
		if f.forgetAccount {
			s.forgetAccount(ctx, b.Profile)
		}
		if f.verdict == coolDown {
			s.coolDown(ctx, f.after)
		}
		log.Warn("preparing the upstream order failed; its finalize relays without it", zap.String("event", "relay_prepare_failed"),
			zap.String("profile", b.Profile), zap.String("order", o.ID), zap.Stringer("verdict", f.verdict),
			zap.String("reason", f.reason))
	}
}

func (s *Signer) prepare(ctx context.Context, b *signer.Binding, log *zap.Logger, o store.Order) error {
	c := s.upstream
	acct, err := s.account(ctx, c, b.Profile)
	if err != nil {
		return err
	}
	// Claimed first: a relay of this order on another instance (its
	// finalize was quicker) places the order itself, or waits for this
	// one to (placement.go).
	claim, placed, err := s.claimPlacement(ctx, b.DB, o.ID)
	if err != nil {
		return fmt.Errorf("claiming the placement of the upstream order: %w", err)
	}
	if claim == nil {
		log.Debug("the upstream order is placed elsewhere", zap.String("event", "relay_prepare_skipped"),
			zap.String("profile", b.Profile), zap.String("order", o.ID), zap.String("upstream_order", s.secrets.text(placed.UpstreamOrderURL)))
		return nil
	}
	ro := store.RelayOrder{OrderID: o.ID, Identifiers: o.Identifiers, NotBefore: o.NotBefore, NotAfter: o.NotAfter,
		CertificateProfile: o.CertificateProfile, Replaces: o.Replaces}
	order, err := claim.place(ctx, s.clock.Now(), func(ctx context.Context) (acme.Order, error) {
		want, err := s.orderRequest(ctx, c, b, ro)
		if err != nil {
			return acme.Order{}, err
		}
		return s.placeOrder(ctx, c, acct, b, log, ro, want)
	})
	if err != nil {
		return err
	}
	// Recorded durably beside the requests that answer its challenges:
	// once the record is durable the upstream order is either relayed or
	// deactivated, and only a finalize that reads the record relays it
	// (preparedUpstream, after waiting for the preparation up to its
	// FinalizeWait; a durable write is visible only once durable). A crash before
	// the record leaves an upstream order that nothing finalizes, its
	// authorizations perhaps valid, to expire upstream — as a crash
	// between its placement and its record always could.
	// The record is written even when the signer is closed meanwhile
	// (Close waits for it): an upstream order placed is then one its
	// relay_prepared job deactivates, not one nothing names. The
	// placement, which relays on other instances wait for, names it
	// once the job does.
	gate := startRecord(func() (string, error) {
		ctx := context.WithoutCancel(ctx)
		if _, _, err := b.Queue.Enqueue(ctx, jobs.Spec{
			Kind: PreparedKind, Key: o.ID, Lane: signer.SigningLane(b.Profile),
			Payload: preparedPayload{Profile: b.Profile, Order: o.ID, Upstream: order.Location},
			RunAt:   o.Expires, Deadline: o.Expires.Add(preparedGrace), MaxAttempts: s.opts.MaxAttempts,
		}); err != nil {
			return "", fmt.Errorf("recording the prepared upstream order: %w", err)
		}
		if _, err := claim.record(ctx, order.Location, s.clock.Now()); err != nil {
			return "", fmt.Errorf("recording the prepared upstream order: %w", err)
		}
		log.Info("upstream order prepared", zap.String("event", "relay_upstream_prepared"), zap.String("profile", b.Profile),
			zap.String("order", o.ID), zap.String("upstream_order", s.secrets.text(order.Location)))
		return order.Location, nil
	})
	switch order.Status {
	case acme.StatusPending:
		_, err = s.authorize(ctx, c, recorderOf(ctx), acct, order, o.ID)
	case acme.StatusReady, acme.StatusProcessing, acme.StatusValid:
	default:
		err = permanent("the prepared upstream order %s is %s", order.Location, order.Status)
	}
	gate.finish()
	if gate.err != nil {
		return gate.err
	}
	return err
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
	if wait := s.coolingDown(ctx); wait > 0 {
		return jobs.RetryAfter(fmt.Sprintf("the upstream rate-limited this profile; waiting %s", wait.Round(time.Second)), wait)
	}
	actx, cancel := context.WithTimeout(ctx, s.opts.AttemptTimeout)
	defer cancel()
	rec := &recorder{base: s.transport, now: s.clock.Now}
	actx = withRecorder(actx, rec)
	n, err := s.deactivate(actx, b, p.Upstream)
	if err != nil {
		if ctx.Err() != nil {
			return jobs.RetryAfter("interrupted: "+s.secrets.reasonOf(err), 0)
		}
		f := s.secrets.classify(err, rec.lastResponse())
		if f.verdict == coolDown {
			s.coolDown(ctx, f.after)
		}
		return outcomeFor(f, "upstream "+s.secrets.directory+": deactivating "+s.secrets.text(p.Upstream)+": "+f.reason)
	}
	log.Info("prepared upstream order abandoned", zap.String("event", "relay_prepared_abandoned"),
		zap.String("profile", b.Profile), zap.String("order", p.Order), zap.String("upstream_order", s.secrets.text(p.Upstream)),
		zap.Int("deactivated", n))
	return jobs.Done()
}

// deactivate deactivates every authorization of the upstream order at url
// that could still serve it (pending or valid), and returns how many —
// save a valid one whose name a live local order of the profile names:
// the upstream may have reused it (Pebble and Boulder reuse an account's
// valid authorizations) for that order's upstream order, which its
// deactivation would make invalid (RFC 8555 §7.1.6), failing or
// re-ordering a relay this one has nothing to do with. Left valid, it
// expires upstream.
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
	if err := authorizationsProblem(order); err != nil {
		return 0, err
	}
	n := 0
	for _, u := range order.Authorizations {
		if err := urlProblem("authorization", u); err != nil {
			return n, err
		}
		authz, err := c.GetAuthorization(ctx, acct, u)
		if err != nil {
			return n, fmt.Errorf("reading an upstream authorization: %w", err)
		}
		if authz.Status != acme.StatusPending && authz.Status != acme.StatusValid {
			continue
		}
		if authz.Status == acme.StatusValid {
			// A valid authorization for example.com may serve an order
			// for *.example.com too, and one for *.example.com an order
			// for example.com: both names are asked for.
			names := []string{authz.Identifier.Value, "*." + authz.Identifier.Value}
			if authz.Identifier.Type != vocab.IdentifierDNS {
				names = names[:1]
			}
			live, err := b.DB.LiveOrderNames(ctx, b.Profile, names, s.clock.Now())
			if err != nil {
				return n, err
			}
			if live {
				continue
			}
		}
		if _, err := c.DeactivateAuthorization(ctx, acct, u); err != nil {
			return n, fmt.Errorf("deactivating the upstream authorization for %s: %w", authz.IdentifierValue(), err)
		}
		n++
	}
	return n, nil
}

// preparedLifeNeeded is how long a prepared upstream order (and each of
// its authorizations) must still live for a relay to take it: the
// longest the relay waits for the upstream to validate a challenge still
// to answer, and then for the order to be issued after its finalize.
const preparedLifeNeeded = maxValidationWait + maxProcessingWait

// spentPrepared says why order, the upstream order recorded for orderID,
// is a prepared one that the relay cannot finish — invalid (its
// challenge failed upstream during the preparation, an authorization
// expired or was deactivated), or it or one of its authorizations
// expiring within preparedLifeNeeded — and "" when it is not prepared or
// can still be finalized. A prepared order was placed at new-order and
// aged while the client proved its names here, however long it took:
// the client's order, live still, must not fail for it (README: a
// preparation that fails costs the order nothing). An upstream order
// the relay placed itself for the finalize is not second-guessed: one
// that expired did so while the relay kept failing at it, and failing
// says so (invalidReason).
func (s *Signer) spentPrepared(ctx context.Context, c *acme.Client, acct acme.Account, b *signer.Binding, orderID string, order acme.Order) (string, error) {
	switch order.Status {
	case acme.StatusPending, acme.StatusReady, acme.StatusInvalid:
	default:
		return "", nil // finalized already: its certificate is what is left
	}
	// Its relay_prepared job names a prepared order (live until the
	// local order expires); the placement alone may name one the relay
	// placed itself, under its claim.
	prepared, err := s.preparedJob(ctx, b, orderID)
	if err != nil || prepared != order.Location {
		return "", err
	}
	if order.Status == acme.StatusInvalid {
		reason, _ := s.invalidReason(ctx, c, acct, order)
		return "it is invalid: " + reason, nil
	}
	now := s.clock.Now()
	short := func(expires time.Time) bool { return !expires.IsZero() && expires.Sub(now) < preparedLifeNeeded }
	if short(order.Expires) {
		return fmt.Sprintf("it expires at %s", order.Expires.UTC().Format(time.RFC3339)), nil
	}
	if err := authorizationsProblem(order); err != nil {
		return "", err
	}
	for _, u := range order.Authorizations {
		if err := urlProblem("authorization", u); err != nil {
			return "", err
		}
		authz, err := c.GetAuthorization(ctx, acct, u)
		if err != nil {
			return "", fmt.Errorf("reading an upstream authorization: %w", err)
		}
		switch {
		case authz.Status != acme.StatusPending && authz.Status != acme.StatusValid:
			return fmt.Sprintf("its authorization for %s is %s", authz.IdentifierValue(), authz.Status), nil
		case short(authz.Expires):
			return fmt.Sprintf("its authorization for %s expires at %s", authz.IdentifierValue(), authz.Expires.UTC().Format(time.RFC3339)), nil
		}
	}
	return "", nil
}

// recorderOf is the recorder an attempt's context carries.
func recorderOf(ctx context.Context) *recorder {
	rec, _ := ctx.Value(recorderKey{}).(*recorder)
	return rec
}
