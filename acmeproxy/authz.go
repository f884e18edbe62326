package acmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// authzJSON is an authorization object (RFC 8555 §7.1.4). A wildcard's
// identifier is its base name, with wildcard: true.
type authzJSON struct {
	Identifier signer.Identifier `json:"identifier"`
	Status     string            `json:"status"`
	Expires    string            `json:"expires,omitempty"`
	Challenges []challengeJSON   `json:"challenges"`
	Wildcard   bool              `json:"wildcard,omitempty"`
}

// challengeJSON is a challenge object (RFC 8555 §7.1.5, §8).
type challengeJSON struct {
	Type      string          `json:"type"`
	URL       string          `json:"url"`
	Status    string          `json:"status"`
	Token     string          `json:"token"`
	Validated string          `json:"validated,omitempty"`
	Error     json.RawMessage `json:"error,omitempty"`
}

func (s *Server) authzStatus(a store.Authz) string {
	if a.Status == "pending" && !s.clock.Now().Before(a.Expires) {
		return "expired"
	}
	return a.Status
}

func (s *Server) authzJSON(base string, a store.Authz) authzJSON {
	out := authzJSON{
		Identifier: signer.Identifier(a.Identifier), Status: s.authzStatus(a),
		Expires: rfc3339(a.Expires), Wildcard: a.Wildcard, Challenges: []challengeJSON{},
	}
	for _, c := range a.Challenges {
		out.Challenges = append(out.Challenges, challengeJSONOf(base, c))
	}
	return out
}

func challengeJSONOf(base string, c store.Challenge) challengeJSON {
	return challengeJSON{Type: c.Type, URL: base + "/chall/" + c.ID, Status: c.Status, Token: c.Token,
		Validated: rfc3339(c.Validated), Error: c.Error}
}

// handleAuthz reads or deactivates an authorization (RFC 8555 §7.5, §7.5.2).
func (s *Server) handleAuthz(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := r.Context()
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	a, err := s.loadOwnAuthz(ctx, req, id)
	if err != nil {
		return err
	}
	if !req.postAsGet {
		var p struct {
			Status string `json:"status"`
		}
		if err := decodePayload(req.payload, &p); err != nil {
			return err
		}
		if p.Status != "deactivated" {
			return problem.MalformedF("an authorization's status may only be set to deactivated")
		}
		err := s.db.DeactivateAuthz(ctx, id, s.clock.Now())
		if errors.Is(err, store.ErrWrongState) {
			return problem.MalformedF("only a pending or valid authorization can be deactivated; this one is %s", s.authzStatus(a))
		}
		if err != nil {
			return err
		}
		if a, err = s.db.GetAuthz(ctx, s.cfg.Profile, id); err != nil {
			return err
		}
	}
	for _, c := range a.Challenges {
		if c.Status == "processing" {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterProcessing))
		}
	}
	s.writeJSON(w, http.StatusOK, s.authzJSON(s.baseURL(r), a))
	return nil
}

func (s *Server) loadOwnAuthz(ctx context.Context, req *signedRequest, id string) (store.Authz, error) {
	a, err := s.db.GetAuthz(ctx, s.cfg.Profile, id)
	if errors.Is(err, store.ErrNotFound) {
		return a, problem.NotFound("authorization")
	}
	if err != nil {
		return a, err
	}
	if a.AccountID != req.account.ID {
		return a, problem.UnauthorizedF("this authorization belongs to another account")
	}
	return a, nil
}

// handleChallenge reads a challenge (POST-as-GET) or asks for its
// validation (POST {}), which is queued as a challenge_validate job and
// answered with status processing at once (RFC 8555 §7.5.1).
func (s *Server) handleChallenge(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := r.Context()
	req, err := s.verify(ctx, r, needKID)
	if err != nil {
		return err
	}
	c, a, err := s.db.GetChallenge(ctx, s.cfg.Profile, id)
	if errors.Is(err, store.ErrNotFound) {
		return problem.NotFound("challenge")
	}
	if err != nil {
		return err
	}
	if a.AccountID != req.account.ID {
		return problem.UnauthorizedF("this challenge belongs to another account's authorization")
	}
	base := s.baseURL(r)
	if !req.postAsGet && c.Status == "pending" {
		if st := s.authzStatus(a); st != "pending" {
			return problem.MalformedF("the authorization is %s; its challenges can no longer be answered", st)
		}
		// Store the validation job first, then flip the challenge: a crash
		// in between leaves a job that finds the challenge pending and
		// validates it anyway, never a challenge in processing with nobody
		// to finish it. The job starts at once, and a validation that ends
		// within inlineValidationWait is answered in this response, so the
		// client's first poll finds it settled; a slower one goes on in the
		// background and the client polls as usual.
		_, done, err := s.queue.RunNow(ctx, jobs.Spec{
			Kind: ValidateKind, Key: c.ID,
			Payload:     validatePayload{Profile: s.cfg.Profile, Challenge: c.ID},
			Deadline:    a.Expires,
			MaxAttempts: validateAttempts,
		}, inlineValidationWait)
		if err != nil {
			return err
		}
		// A validation that settled in time needs no processing mark: it
		// went straight from pending to its result. One still running, or
		// waiting for a retry, or queued for a runner elsewhere, is marked
		// so the client sees its answer was taken (RFC 8555 §7.1.6).
		if c, _, err = s.db.GetChallenge(ctx, s.cfg.Profile, id); err != nil {
			return err
		}
		if !done || c.Status == "pending" {
			if _, err := s.db.StartChallenge(ctx, c.ID, s.clock.Now()); err != nil {
				return err
			}
			if c, _, err = s.db.GetChallenge(ctx, s.cfg.Profile, id); err != nil {
				return err
			}
		}
	}
	w.Header().Add("Link", link(base+"/authz/"+a.ID, "up"))
	if c.Status == "processing" {
		// RFC 8555 §8.2: tell the client when to look again.
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterProcessing))
	}
	s.writeJSON(w, http.StatusOK, challengeJSONOf(base, c))
	return nil
}

// ---- validation job ----

// ValidateKind is the job kind that validates a challenge.
const ValidateKind = "challenge_validate"

// validateAttempts bounds retries of a validation that failed on our side
// (not the client's: a wrong answer settles the challenge at once).
const validateAttempts = 5

type validatePayload struct {
	Profile   string `json:"profile"`
	Challenge string `json:"challenge"`
}

// validate runs one validation and records the result. It is called by
// the challenge_validate job for this profile.
func (s *Server) validate(ctx context.Context, challengeID string) jobs.Outcome {
	c, a, err := s.db.GetChallenge(ctx, s.cfg.Profile, challengeID)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Failed("challenge not found")
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	now := s.clock.Now()
	switch {
	case c.Status != "pending" && c.Status != "processing":
		// Settled already (a repeated job, or one that outlived a crash).
		return jobs.Done()
	case !now.Before(a.Expires):
		body, _ := json.Marshal(problem.UnauthorizedF("the authorization expired before it was validated"))
		if _, err := s.db.CompleteChallenge(ctx, c.ID, false, body, now); err != nil && !errors.Is(err, store.ErrWrongState) {
			return jobs.Retry(err.Error())
		}
		return jobs.Done()
	}
	acct, err := s.db.GetAccount(ctx, s.cfg.Profile, a.AccountID)
	if err != nil {
		return jobs.Retry(err.Error())
	}
	keyAuth := c.Token + "." + acct.Thumbprint
	verr := s.runValidator(ctx, c, a, keyAuth)
	var prob *problem.Problem
	if verr != nil {
		var ok bool
		if prob, ok = problem.As(verr); !ok {
			return jobs.Retry(fmt.Sprintf("validating %s: %v", c.Type, verr))
		}
		prob.Identifier = &problem.Identifier{Type: a.Identifier.Type, Value: a.Identifier.Value}
	}
	var (
		body []byte
		owed []store.NewJob
	)
	now = s.clock.Now()
	if prob != nil {
		body, _ = json.Marshal(prob)
		owed = s.challengeFailedJobs(a, c, prob, now)
	}
	res, err := s.db.CompleteChallenge(ctx, c.ID, prob == nil, body, now, owed...)
	if errors.Is(err, store.ErrWrongState) {
		return jobs.Done()
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	s.notified(owed)
	outcome := "valid"
	if prob != nil {
		outcome = "invalid"
	}
	s.metrics.Validated(s.cfg.Profile, c.Type, outcome)
	fields := []zap.Field{zap.String("profile", s.cfg.Profile), zap.String("order", res.OrderID),
		zap.String("challenge", c.ID), zap.String("type", c.Type), zap.String("identifier", a.Identifier.Value)}
	if prob != nil {
		s.log.Info("challenge failed", append(fields, zap.String("event", EventChallengeFailed), zap.String("problem", prob.Detail))...)
	} else {
		s.log.Debug("challenge valid", append(fields, zap.String("event", "challenge_valid"), zap.String("order_status", res.OrderStatus))...)
	}
	return jobs.Done()
}

// challengeFailedJobs are the notifications of a failed challenge.
func (s *Server) challengeFailedJobs(a store.Authz, c store.Challenge, prob *problem.Problem, now time.Time) []store.NewJob {
	if len(s.notify) == 0 {
		return nil
	}
	return s.notifyJobs(notify.Event{
		Event: EventChallengeFailed, Order: a.OrderID, Account: a.AccountID,
		Identifiers: notifyIdentifiers([]store.Identifier{a.Identifier}),
		Reason:      string(prob.Type), Detail: c.Type + ": " + prob.Detail, Time: now,
	})
}

// inlineValidationWait is how long a challenge POST waits for its
// validation before answering processing. It bounds how long a slow client
// server can hold the request open.
const inlineValidationWait = time.Second

// validationTimeout bounds one validation attempt.
const validationTimeout = 30 * time.Second

func (s *Server) runValidator(ctx context.Context, c store.Challenge, a store.Authz, keyAuth string) error {
	ctx, cancel := context.WithTimeout(ctx, validationTimeout)
	defer cancel()
	switch c.Type {
	case ChallengeHTTP01:
		return s.validator.HTTP01(ctx, a.Identifier.Type, a.Identifier.Value, c.Token, keyAuth)
	case ChallengeDNS01:
		return s.validator.DNS01(ctx, a.Identifier.Value, keyAuth)
	case ChallengeTLSALPN01:
		return s.validator.TLSALPN01(ctx, a.Identifier.Type, a.Identifier.Value, keyAuth)
	}
	return problem.MalformedF("challenge type %q is not supported", c.Type)
}

// Profiles finds the Server of a profile mounted in this process.
type Profiles interface {
	Lookup(profile string) (*Server, bool)
}

// ValidationJobs is the challenge_validate job handler. It dispatches each
// job to the profile's Server; a job for a profile this process does not
// mount is retried later, not failed (another instance, or the next
// config, may mount it).
type ValidationJobs struct {
	Profiles Profiles
	DB       *store.DB
	Clock    clock.Clock
}

// Kind implements jobs.Handler.
func (v *ValidationJobs) Kind() string { return ValidateKind }

// Concurrency lets many slow validations run at once: each mostly waits
// on the network.
func (v *ValidationJobs) Concurrency() int { return 32 }

// Run implements jobs.Handler.
func (v *ValidationJobs) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	var p validatePayload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	s, ok := v.Profiles.Lookup(p.Profile)
	if !ok {
		return jobs.RetryAfter("profile "+p.Profile+" is not mounted in this process", 30*time.Second)
	}
	return s.validate(ctx, p.Challenge)
}

// Recover re-queues validations owed to challenges left in processing
// (their job was pruned or lost with an older binary); the kind+key
// identity makes this a no-op for those whose job is alive.
func (v *ValidationJobs) Recover(ctx context.Context, q *jobs.Queue) error {
	owed, err := v.DB.ProcessingChallenges(ctx)
	if err != nil {
		return err
	}
	for _, c := range owed {
		if _, _, err := q.Enqueue(ctx, jobs.Spec{Kind: ValidateKind, Key: c.ID,
			Payload: validatePayload{Profile: c.Profile, Challenge: c.ID}, MaxAttempts: validateAttempts}); err != nil {
			return err
		}
	}
	return nil
}

// Abandon marks the challenge invalid: validation could not be carried out
// (our fault, or the authorization expired first).
func (v *ValidationJobs) Abandon(ctx context.Context, job *jobs.Job, reason string) {
	var p validatePayload
	if jobs.Decode(job, &p) != nil {
		return
	}
	body, _ := json.Marshal(problem.Internal())
	_, _ = v.DB.CompleteChallenge(ctx, p.Challenge, false, body, v.Clock.Now())
}
