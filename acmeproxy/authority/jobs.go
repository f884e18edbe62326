package authority

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Profiles finds the Authority of a profile mounted in this process.
type Profiles interface {
	Lookup(profile string) (*Authority, bool)
}

// notMountedDelay is how long a job waits for its profile to be mounted
// (by another instance, or by the next config) before it is tried again.
const notMountedDelay = 30 * time.Second

// profilePayload is the payload of a profile-scoped job: it names the
// profile whose authority runs it.
type profilePayload interface {
	profileName() string
}

// profileJobs is the job handler of one kind of profile-scoped job: it
// decodes the payload P (a payload that does not decode fails the job),
// finds the authority of the profile it names and runs the attempt there.
// A job for a profile this process does not mount is retried after
// notMountedDelay without spending an attempt (another instance, or the
// next config, may mount it), unless unmounted says otherwise.
type profileJobs[P profilePayload] struct {
	kind        string
	profiles    Profiles
	concurrency int // 0: the runner's default
	run         func(ctx context.Context, au *Authority, job *jobs.Job, p P) jobs.Outcome
	// unmounted, when set, runs the attempt of a job whose profile is not
	// mounted here.
	unmounted func(ctx context.Context, job *jobs.Job, p P) jobs.Outcome
	recover   func(ctx context.Context, q *jobs.Queue) error // nil: nothing to recover
	// abandon (nil: nothing to undo) returns an error when what it
	// writes could not be written and may be on a later try (see
	// jobs.Handler.Abandon): it must be idempotent.
	abandon func(ctx context.Context, job *jobs.Job, reason string) error
}

// Kind implements jobs.Handler.
func (h *profileJobs[P]) Kind() string { return h.kind }

// Concurrency implements jobs.Limiter.
func (h *profileJobs[P]) Concurrency() int { return h.concurrency }

// lookup decodes a job's payload and finds the authority of its profile;
// ok is false when the profile is not mounted here.
func (h *profileJobs[P]) lookup(job *jobs.Job) (au *Authority, p P, ok bool, err error) {
	if err := jobs.Decode(job, &p); err != nil {
		return nil, p, false, err
	}
	au, ok = h.profiles.Lookup(p.profileName())
	return au, p, ok, nil
}

// Run implements jobs.Handler.
func (h *profileJobs[P]) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	au, p, ok, err := h.lookup(job)
	switch {
	case err != nil:
		return jobs.Failed(err.Error())
	case !ok && h.unmounted != nil:
		return h.unmounted(ctx, job, p)
	case !ok:
		return jobs.RetryAfter("profile "+p.profileName()+" is not mounted in this process", notMountedDelay)
	}
	return h.run(ctx, au, job, p)
}

// Recover implements jobs.Handler.
func (h *profileJobs[P]) Recover(ctx context.Context, q *jobs.Queue) error {
	if h.recover == nil {
		return nil
	}
	return h.recover(ctx, q)
}

// Abandon implements jobs.Handler.
func (h *profileJobs[P]) Abandon(ctx context.Context, job *jobs.Job, reason string) error {
	if h.abandon == nil {
		return nil
	}
	return h.abandon(ctx, job, reason)
}

// ---- challenge_validate ----

func (p validatePayload) profileName() string { return p.Profile }

// ValidationJobs is the challenge_validate job handler. It runs each job
// with the profile's authority. Many slow validations run at once: each
// mostly waits on the network.
func ValidationJobs(profiles Profiles, db *store.DB, clk clock.Clock) jobs.Handler {
	return &profileJobs[validatePayload]{
		kind: ValidateKind, profiles: profiles, concurrency: 32,
		run: func(ctx context.Context, au *Authority, _ *jobs.Job, p validatePayload) jobs.Outcome {
			return au.RunValidation(ctx, p.Challenge, Client{IP: p.ClientIP, UserAgent: p.UserAgent})
		},
		// Re-queue validations owed to challenges left in processing
		// (their job was pruned or lost with an older binary); the
		// kind+key identity makes this a no-op for those whose job is
		// alive. Each ends with its authorization, as one queued at
		// the challenge's POST does: where the profile is not mounted
		// (a reload removed it) it would otherwise wait for ever.
		recover: func(ctx context.Context, q *jobs.Queue) error {
			owed, err := db.ProcessingChallenges(ctx)
			if err != nil {
				return err
			}
			for _, c := range owed {
				if _, _, err := q.Enqueue(ctx, jobs.Spec{Kind: ValidateKind, Key: c.ID,
					Payload: validatePayload{Profile: c.Profile, Challenge: c.ID}, Deadline: c.AuthzExpires, MaxAttempts: validateAttempts}); err != nil {
					return err
				}
			}
			return nil
		},
		// The challenge becomes invalid: validation could not be carried
		// out (our fault, or the authorization expired first), audited
		// and notified as challenge_failed. A challenge settled already
		// is left as it is. No attempt's fault
		// was logged (each is the job's last_error): the operator learns
		// of the challenge failed on our side here, once, with the last.
		abandon: func(ctx context.Context, job *jobs.Job, reason string) error {
			var p validatePayload
			if jobs.Decode(job, &p) != nil {
				return nil
			}
			au, ok := profiles.Lookup(p.Profile)
			if !ok {
				// A profile this process does not mount: audited all the
				// same, its notifications routed to where it is mounted.
				_, err := failAbandonedUnmounted(ctx, db, p.Profile, p.Challenge, Client{IP: p.ClientIP, UserAgent: p.UserAgent}, clk.Now())
				return err
			}
			// Audited and notified as challenge_failed.
			settled, err := au.FailAbandoned(ctx, p.Challenge, Client{IP: p.ClientIP, UserAgent: p.UserAgent})
			if err != nil || !settled {
				return err
			}
			au.log.Warn("challenge validation abandoned: it could not be carried out, and the challenge is invalid",
				zap.String("event", "challenge_abandoned"), zap.String("profile", p.Profile),
				zap.String("challenge", p.Challenge), zap.Int64("job", job.ID), zap.String("reason", reason))
			return nil
		},
	}
}

// ---- signer jobs ----

type signerJobPayload struct {
	Profile string `json:"profile"`
}

func (p signerJobPayload) profileName() string { return p.Profile }

// SignerJobHandlers returns one handler per kind of durable job the
// signers of authorities run (signer.JobWorker), for a runner about to
// start. Each job goes to the signer of the profile named in its payload;
// a job whose profile this process does not mount, or whose profile's
// signer does not run that kind (the config changed), is retried later
// without spending an attempt. Recover asks each signer mounted now that
// runs the kind to re-queue its work.
func SignerJobHandlers(profiles Profiles, authorities []*Authority, logger *zap.Logger) []jobs.Handler {
	if logger == nil {
		logger = zap.NewNop()
	}
	byKind := map[string][]signer.JobWorker{}
	for _, au := range authorities {
		w, ok := au.signer.(signer.JobWorker)
		if !ok {
			continue
		}
		for _, k := range w.JobKinds() {
			byKind[k] = append(byKind[k], w)
		}
	}
	kinds := slices.Sorted(maps.Keys(byKind))
	out := make([]jobs.Handler, len(kinds))
	for i, k := range kinds {
		out[i] = signerJobs(k, profiles, byKind[k], logger)
	}
	return out
}

// signerJobs is the handler of one kind of signer job.
func signerJobs(kind string, profiles Profiles, workers []signer.JobWorker, logger *zap.Logger) jobs.Handler {
	h := &profileJobs[signerJobPayload]{kind: kind, profiles: profiles}
	// worker finds the signer that runs job, or says why there is none.
	worker := func(au *Authority, job *jobs.Job, p signerJobPayload) (signer.JobWorker, string) {
		w, ok := au.signer.(signer.JobWorker)
		if !ok || !slices.Contains(w.JobKinds(), job.Kind) {
			return nil, fmt.Sprintf("the signer of profile %s does not run %s jobs", p.Profile, job.Kind)
		}
		return w, ""
	}
	h.run = func(ctx context.Context, au *Authority, job *jobs.Job, p signerJobPayload) jobs.Outcome {
		w, why := worker(au, job, p)
		if w == nil {
			return jobs.RetryAfter(why, notMountedDelay)
		}
		return w.RunJob(ctx, job)
	}
	h.recover = func(ctx context.Context, q *jobs.Queue) error {
		for _, w := range workers {
			if err := w.RecoverJobs(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
	// A job retired here while its profile is not mounted cannot reach its
	// signer; the order it was working for is then resumed, and failed, by
	// an instance that mounts the profile.
	h.abandon = func(ctx context.Context, job *jobs.Job, reason string) error {
		au, p, ok, err := h.lookup(job)
		var w signer.JobWorker
		why := fmt.Sprintf("profile %s is not mounted in this process", p.Profile)
		switch {
		case err != nil:
			why = err.Error()
		case ok:
			w, why = worker(au, job, p)
		}
		if w == nil {
			logger.Warn("signer job abandoned where its signer is not mounted", zap.String("event", "signer_job_orphaned"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.String("why", why), zap.String("reason", reason))
			return nil
		}
		return w.AbandonJob(ctx, job, reason)
	}
	return h
}

// ---- revocation and CRL publishing ----

func (p revokePayload) profileName() string { return p.Profile }
func (p crlPayload) profileName() string    { return p.Profile }

// RevocationJobHandlers are the job handlers of revocation and CRL
// publishing for a runner: signer_revoke, crl_regenerate and the periodic
// crl_refresh. authorities lists the mounted profiles when called. The
// refresh runs only on instances holding a signer (signer.AnySignerLane),
// and also republishes what their profiles publish for the instances
// serving them without the signer (a CA renewed, a new issuer). db and
// clk write the audit row of a revocation retired where its profile is
// not mounted.
func RevocationJobHandlers(profiles Profiles, authorities func() []*Authority, db *store.DB, clk clock.Clock, logger *zap.Logger) []jobs.Handler {
	if logger == nil {
		logger = zap.NewNop()
	}
	return []jobs.Handler{
		revokeJobs(profiles, db, clk, logger),
		crlJobs(profiles, authorities, logger),
		&jobs.Periodic{Name: CRLRefreshKind, Every: CRLRefreshEvery, Lane: signer.AnySignerLane, Do: func(ctx context.Context) error {
			aus := authorities()
			return errors.Join(PublishAll(ctx, aus), RefreshCRLs(ctx, aus))
		}},
	}
}

// revokeJobs runs signer_revoke jobs: each tells the signer of the profile
// named in its payload to revoke at its backend, then records the
// revocation. Nothing is recovered: a queued revocation is a live job
// already, and a request that found none queues one.
func revokeJobs(profiles Profiles, db *store.DB, clk clock.Clock, logger *zap.Logger) jobs.Handler {
	h := &profileJobs[revokePayload]{kind: RevokeKind, profiles: profiles,
		run: func(ctx context.Context, au *Authority, _ *jobs.Job, p revokePayload) jobs.Outcome {
			return au.runRevoke(ctx, p)
		}}
	// The certificate stays unrevoked; the failure is audited and logged
	// for the operator, wherever the job is retired: an operator may
	// cancel it on an instance that does not mount its profile, and the
	// row needs only the payload and the store. The audit row carries the
	// retirement's key (jobs.AbandonKey): an abandon tried again after an
	// outage, or run again after a crash before the job's retirement was
	// recorded, writes it once. One that cannot write it says so, and is
	// tried again.
	h.abandon = func(ctx context.Context, job *jobs.Job, reason string) error {
		au, p, ok, err := h.lookup(job)
		if err != nil {
			return nil
		}
		cl := Client{IP: p.ClientIP, UserAgent: p.UserAgent}
		ev := store.AuditEvent{At: clk.Now(), Event: acme.EventRevocationFailed, Outcome: OutcomeFailure, Profile: p.Profile,
			ActorKind: p.Actor.Kind, ActorID: p.Actor.ID, ClientIP: cl.IP, UserAgent: cl.UserAgent}
		if ok {
			// The same, with the client's reverse name, as the
			// profile's other rows have it.
			ev = au.event(ctx, acme.EventRevocationFailed, OutcomeFailure, p.Actor, cl)
		}
		ev.OrderID, ev.Detail, ev.DedupKey = p.Order, reason, jobs.AbandonKey(job)
		// The serial, so that a search of the audit trail by it finds
		// the failure beside the certificate's other rows.
		c, err := db.GetCertificate(ctx, p.Profile, p.Certificate)
		switch {
		case err == nil:
			ev.Serial = c.Serial
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("reading the certificate of a failed revocation: %w", err)
		}
		if p.Reason != nil {
			ev.Reason = strconv.Itoa(*p.Reason)
		}
		if err := db.InsertAudit(ctx, ev); err != nil {
			return err
		}
		logger.Warn("revocation abandoned", zap.String("event", acme.EventRevocationFailed), zap.String("profile", p.Profile),
			zap.String("order", p.Order), zap.String("serial", ev.Serial), zap.Int64("job", job.ID), zap.Bool("profile_mounted", ok),
			zap.String("reason", reason))
		return nil
	}
	return h
}

// crlJobs runs crl_regenerate jobs, each with the signer of a mounted
// profile that issues from the job's CA: the one that queued it, or, when
// that one is gone, another (authorities lists the mounted profiles).
func crlJobs(profiles Profiles, authorities func() []*Authority, logger *zap.Logger) jobs.Handler {
	run := func(ctx context.Context, own *Authority, p crlPayload) jobs.Outcome {
		au, iss, err := authorityFor(ctx, own, authorities, p)
		switch {
		case errors.Is(err, signer.ErrIssuerUnknown):
			// Profiles mounted here served it and know nothing of the
			// CA: no later attempt can sign its CRL.
			return jobs.Failed(err.Error())
		case err != nil:
			return jobs.Retry(err.Error())
		case au == nil:
			return jobs.RetryAfter("no profile mounted in this process issues from CA "+p.Issuer, notMountedDelay)
		}
		return au.runCRL(ctx, iss, p.Issuer)
	}
	return &profileJobs[crlPayload]{kind: CRLRegenerateKind, profiles: profiles,
		run: func(ctx context.Context, au *Authority, _ *jobs.Job, p crlPayload) jobs.Outcome {
			return run(ctx, au, p)
		},
		unmounted: func(ctx context.Context, _ *jobs.Job, p crlPayload) jobs.Outcome {
			return run(ctx, nil, p)
		},
		// Queue a regeneration for every CA a mounted profile holds whose
		// CRL lacks revocations of the ledger, as a crash between a
		// revocation and its job leaves it.
		recover: func(ctx context.Context, _ *jobs.Queue) error {
			if authorities == nil {
				return nil
			}
			return queueStaleCRLs(ctx, authorities())
		},
		abandon: func(_ context.Context, job *jobs.Job, reason string) error {
			logger.Error("CRL regeneration abandoned", zap.String("event", "crl_abandoned"),
				zap.String("key", job.Key), zap.Int64("job", job.ID), zap.String("reason", reason))
			return nil
		},
	}
}

// authorityFor finds a mounted profile whose signer holds the job's CA:
// own, the one that queued it (nil when it is not mounted here), or any
// other. With none, the error wraps signer.ErrIssuerUnknown when own is
// mounted (its signer has no record of the CA), signer.ErrIssuerUnavailable
// when a signer could not read its records; a nil authority and error say
// the profile is not mounted in this process.
func authorityFor(ctx context.Context, own *Authority, authorities func() []*Authority, p crlPayload) (*Authority, signer.IssuerInfo, error) {
	var candidates []*Authority
	if own != nil {
		candidates = append(candidates, own)
	}
	if authorities != nil {
		candidates = append(candidates, authorities()...)
	}
	var unavailable error
	for _, au := range candidates {
		iss, err := au.knownIssuer(ctx, p.Issuer)
		switch {
		case err == nil:
			return au, iss, nil
		case !errors.Is(err, signer.ErrIssuerUnknown) && unavailable == nil:
			unavailable = err
		}
	}
	switch {
	case unavailable != nil:
		return nil, signer.IssuerInfo{}, unavailable
	case own != nil:
		return nil, signer.IssuerInfo{}, fmt.Errorf("%w: profile %s has no record of CA %s", signer.ErrIssuerUnknown, p.Profile, p.Issuer)
	}
	return nil, signer.IssuerInfo{}, nil
}
