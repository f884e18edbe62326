package acmeproxy

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// notMountedDelay is how long a job waits for its profile to be mounted
// (by another instance, or by the next config) before it is tried again.
const notMountedDelay = 30 * time.Second

// SignerJobs is the job handler of one kind of durable job that signers
// run (signer.JobWorker). It dispatches each job to the signer of the
// profile named in its payload; a job whose profile this process does not
// mount, or whose profile's signer does not run that kind (the config
// changed), is retried later without spending an attempt.
type SignerJobs struct {
	JobKind  string
	Profiles Profiles
	// Workers are the signers mounted when the runner starts that run
	// JobKind; Recover asks each to re-queue its work.
	Workers []signer.JobWorker
	Logger  *zap.Logger
}

// SignerJobHandlers returns one SignerJobs per kind of job the signers of
// servers run, for a runner about to start.
func SignerJobHandlers(profiles Profiles, servers []*Server, logger *zap.Logger) []jobs.Handler {
	if logger == nil {
		logger = zap.NewNop()
	}
	byKind := map[string]*SignerJobs{}
	var kinds []string
	for _, s := range servers {
		w, ok := s.signer.(signer.JobWorker)
		if !ok {
			continue
		}
		for _, k := range w.JobKinds() {
			h, ok := byKind[k]
			if !ok {
				h = &SignerJobs{JobKind: k, Profiles: profiles, Logger: logger}
				byKind[k] = h
				kinds = append(kinds, k)
			}
			h.Workers = append(h.Workers, w)
		}
	}
	slices.Sort(kinds)
	out := make([]jobs.Handler, len(kinds))
	for i, k := range kinds {
		out[i] = byKind[k]
	}
	return out
}

// Kind implements jobs.Handler.
func (h *SignerJobs) Kind() string { return h.JobKind }

type signerJobPayload struct {
	Profile string `json:"profile"`
}

// worker finds the signer that runs job, or says why there is none here.
func (h *SignerJobs) worker(job *jobs.Job) (signer.JobWorker, string, error) {
	var p signerJobPayload
	if err := jobs.Decode(job, &p); err != nil {
		return nil, "", err
	}
	s, ok := h.Profiles.Lookup(p.Profile)
	if !ok {
		return nil, fmt.Sprintf("profile %s is not mounted in this process", p.Profile), nil
	}
	w, ok := s.signer.(signer.JobWorker)
	if !ok || !slices.Contains(w.JobKinds(), job.Kind) {
		return nil, fmt.Sprintf("the signer of profile %s does not run %s jobs", p.Profile, job.Kind), nil
	}
	return w, "", nil
}

// Run implements jobs.Handler.
func (h *SignerJobs) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	w, why, err := h.worker(job)
	if err != nil {
		return jobs.Failed(err.Error())
	}
	if w == nil {
		return jobs.RetryAfter(why, notMountedDelay)
	}
	return w.RunJob(ctx, job)
}

// Recover implements jobs.Handler.
func (h *SignerJobs) Recover(ctx context.Context, q *jobs.Queue) error {
	for _, w := range h.Workers {
		if err := w.RecoverJobs(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// Abandon implements jobs.Handler. A job retired here while its profile is
// not mounted cannot reach its signer; the order it was working for is
// then resumed, and failed, by an instance that mounts the profile.
func (h *SignerJobs) Abandon(ctx context.Context, job *jobs.Job, reason string) {
	w, why, err := h.worker(job)
	if w == nil {
		if err != nil {
			why = err.Error()
		}
		h.Logger.Warn("signer job abandoned where its signer is not mounted", zap.String("event", "signer_job_orphaned"),
			zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.String("why", why), zap.String("reason", reason))
		return
	}
	w.AbandonJob(ctx, job, reason)
}
