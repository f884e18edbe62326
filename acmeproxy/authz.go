package acmeproxy

import (
	"github.com/acmeproxy/caddy-acme-proxy/acme"

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
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// authzJSON is an authorization object (RFC 8555 §7.1.4). A wildcard's
// identifier is its base name, with wildcard: true.
type authzJSON struct {
	Identifier acme.Identifier `json:"identifier"`
	Status     acme.Status     `json:"status"`
	Expires    string          `json:"expires,omitempty"`
	Challenges []challengeJSON `json:"challenges"`
	Wildcard   bool            `json:"wildcard,omitempty"`
}

// challengeJSON is a challenge object (RFC 8555 §7.1.5, §8).
type challengeJSON struct {
	Type      string          `json:"type"`
	URL       string          `json:"url"`
	Status    acme.Status     `json:"status"`
	Token     string          `json:"token"`
	Validated string          `json:"validated,omitempty"`
	Error     json.RawMessage `json:"error,omitempty"`
}

func (s *Server) authzStatus(a store.Authz) acme.Status {
	if a.Status == acme.StatusPending && !s.clock.Now().Before(a.Expires) {
		return acme.StatusExpired
	}
	return a.Status
}

func (s *Server) authzJSON(base string, a store.Authz) authzJSON {
	out := authzJSON{
		Identifier: acme.Identifier(a.Identifier), Status: s.authzStatus(a),
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
			Status acme.Status `json:"status"`
		}
		if err := decodePayload(req.payload, &p); err != nil {
			return err
		}
		if p.Status != acme.StatusDeactivated {
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
		if c.Status == acme.StatusProcessing {
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
// validation (POST {}, RFC 8555 §7.5.1): tried at once within the request,
// else handed to a challenge_validate job and answered processing.
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
	if !req.postAsGet && c.Status == acme.StatusPending {
		if st := s.authzStatus(a); st != acme.StatusPending {
			return problem.MalformedF("the authorization is %s; its challenges can no longer be answered", st)
		}
		// Validate right here first, with nothing stored yet: most answers
		// settle within a moment, and one that does is recorded in a single
		// durable write, with no job to store, run and settle. A crash
		// meanwhile leaves the challenge pending and the client without an
		// answer, free to post again.
		settled, late, err := s.validateInline(ctx, &c, a, req.thumbprint)
		if err != nil {
			return err
		}
		if !settled {
			// After an attempt that ran out of time, the client is not
			// kept waiting a second time.
			wait := inlineValidationWait
			if late {
				wait = 0
			}
			if err := s.validateByJob(ctx, c, a, wait); err != nil {
				return err
			}
			if c, _, err = s.db.GetChallenge(ctx, s.cfg.Profile, id); err != nil {
				return err
			}
		}
	}
	w.Header().Add("Link", link(base+"/authz/"+a.ID, "up"))
	if c.Status == acme.StatusProcessing {
		// RFC 8555 §8.2: tell the client when to look again.
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterProcessing))
	}
	s.writeJSON(w, http.StatusOK, challengeJSONOf(base, c))
	return nil
}

// validateByJob hands a challenge's validation to a durable job: for one
// that did not settle inline (slow, failing on our side, or too many at
// once). The job is stored first, then the challenge flipped: a crash in
// between leaves a job that finds the challenge pending and validates it
// anyway, never a challenge in processing with nobody to finish it. The
// job starts at once, and an attempt that ends within wait is answered in
// this response; a slower one goes on in the background and the client
// polls as usual.
func (s *Server) validateByJob(ctx context.Context, c store.Challenge, a store.Authz, wait time.Duration) error {
	_, done, err := s.queue.RunNow(ctx, jobs.Spec{
		Kind: ValidateKind, Key: c.ID,
		Payload:     validatePayload{Profile: s.cfg.Profile, Challenge: c.ID},
		Deadline:    a.Expires,
		MaxAttempts: validateAttempts,
	}, wait)
	if err != nil {
		return err
	}
	// A validation that settled in time needs no processing mark: it went
	// straight from pending to its result. One still running, or waiting
	// for a retry, or queued for a runner elsewhere, is marked so the
	// client sees its answer was taken (RFC 8555 §7.1.6).
	if c, _, err = s.db.GetChallenge(ctx, s.cfg.Profile, c.ID); err != nil {
		return err
	}
	if !done || c.Status == acme.StatusPending {
		if _, err := s.db.StartChallenge(ctx, c.ID, s.clock.Now()); err != nil {
			return err
		}
	}
	return nil
}

// maxInlineValidations bounds the validations challenge POSTs run at once.
const maxInlineValidations = 32

// validateInline runs a challenge's validation within its POST, for up to
// inlineValidationWait, and records a result that settles it: the answer
// found, or the client's wrong answer; *c becomes the challenge as it then
// stands. It reports settled=false — nothing stored — when the attempt ran
// out of time (late), failed on our side, or found too many others
// running: the durable job takes over from there, with its retries and its
// full timeout. keyThumbprint is the signing account key's.
func (s *Server) validateInline(ctx context.Context, c *store.Challenge, a store.Authz, keyThumbprint string) (settled, late bool, err error) {
	select {
	case s.inline <- struct{}{}:
		defer func() { <-s.inline }()
	default:
		return false, false, nil
	}
	ictx, cancel := context.WithTimeout(ctx, inlineValidationWait)
	verr := s.runValidator(ictx, *c, a, c.Token+"."+keyThumbprint)
	late = ictx.Err() != nil
	cancel()
	if late {
		return false, true, nil
	}
	if _, ok := problem.As(verr); verr != nil && !ok {
		return false, false, nil // our fault: the job retries it
	}
	now, mine, err := s.recordValidation(ctx, *c, a, verr)
	if err != nil {
		return false, false, err
	}
	if !mine { // settled meanwhile by someone else: read what they wrote
		if *c, _, err = s.db.GetChallenge(ctx, s.cfg.Profile, c.ID); err != nil {
			return false, false, err
		}
		return true, false, nil
	}
	*c = now
	return true, false, nil
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
	case c.Status != acme.StatusPending && c.Status != acme.StatusProcessing:
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
	// A fault on our side is no verdict: recordValidation refuses it, and
	// the job tries again.
	verr := s.runValidator(ctx, c, a, c.Token+"."+acct.Thumbprint)
	if _, _, err := s.recordValidation(ctx, c, a, verr); err != nil {
		return jobs.Retry(err.Error())
	}
	return jobs.Done()
}

// recordValidation settles a challenge with a validation's verdict: nil
// for the expected answer, else the problem with the client's answer. It
// returns the challenge as recorded; mine is false when someone else
// settled it meanwhile, which is left as it is.
func (s *Server) recordValidation(ctx context.Context, c store.Challenge, a store.Authz, verdict error) (now store.Challenge, mine bool, err error) {
	prob, ok := problem.As(verdict)
	if verdict != nil && !ok {
		return c, false, fmt.Errorf("validating %s: %w", c.Type, verdict) // a fault, not a verdict
	}
	if prob != nil {
		prob.Identifier = &acme.Identifier{Type: a.Identifier.Type, Value: a.Identifier.Value}
	}
	var (
		body []byte
		owed []store.NewJob
	)
	at := s.clock.Now()
	if prob != nil {
		body, _ = json.Marshal(prob)
		owed = s.challengeFailedJobs(a, c, prob, at)
	}
	res, err := s.db.CompleteChallenge(ctx, c.ID, prob == nil, body, at, owed...)
	if errors.Is(err, store.ErrWrongState) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	s.notified(owed)
	outcome := acme.StatusValid
	if prob != nil {
		outcome = acme.StatusInvalid
	}
	s.metrics.Validated(s.cfg.Profile, c.Type, string(outcome))
	fields := []zap.Field{zap.String("profile", s.cfg.Profile), zap.String("order", res.OrderID),
		zap.String("challenge", c.ID), zap.String("type", c.Type), zap.String("identifier", a.Identifier.Value)}
	if prob != nil {
		s.log.Info("challenge failed", append(fields, zap.String("event", acme.EventChallengeFailed), zap.String("problem", prob.Detail))...)
	} else {
		s.log.Debug("challenge valid", append(fields, zap.String("event", "challenge_valid"), zap.String("order_status", string(res.OrderStatus)))...)
	}
	// What CompleteChallenge made of it.
	if prob == nil {
		c.Status, c.Validated, c.Error = acme.StatusValid, at, nil
	} else {
		c.Status, c.Validated, c.Error = acme.StatusInvalid, time.Time{}, body
	}
	return c, true, nil
}

// challengeFailedJobs are the notifications of a failed challenge.
func (s *Server) challengeFailedJobs(a store.Authz, c store.Challenge, prob *problem.Problem, now time.Time) []store.NewJob {
	if len(s.notify) == 0 {
		return nil
	}
	return s.notifyJobs(notify.Event{
		Event: acme.EventChallengeFailed, Order: a.OrderID, Account: a.AccountID,
		Identifiers: notifyIdentifiers([]acme.Identifier{a.Identifier}),
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
	case acme.ChallengeHTTP01:
		return s.validator.HTTP01(ctx, a.Identifier.Type, a.Identifier.Value, c.Token, keyAuth)
	case acme.ChallengeDNS01:
		return s.validator.DNS01(ctx, a.Identifier.Value, keyAuth)
	case acme.ChallengeTLSALPN01:
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
