package authority

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// AuthzStatus is the authorization's status as of now: a pending or
// valid one past its expiry is expired (RFC 8555 §7.1.6), though nothing
// rewrites its row.
func (au *Authority) AuthzStatus(a store.Authz) acme.Status {
	if (a.Status == acme.StatusPending || a.Status == acme.StatusValid) && !au.clock.Now().Before(a.Expires) {
		return acme.StatusExpired
	}
	return a.Status
}

// OwnAuthz reads an authorization of this profile the account owns.
func (au *Authority) OwnAuthz(ctx context.Context, accountID, id string) (store.Authz, error) {
	a, err := au.db.GetAuthz(ctx, au.cfg.Profile, id)
	return owned(a, a.AccountID, err, accountID, "authorization", "this authorization belongs to another account")
}

// OwnChallenge reads a challenge of this profile, with its authorization,
// which the account owns.
func (au *Authority) OwnChallenge(ctx context.Context, accountID, id string) (store.Challenge, store.Authz, error) {
	c, a, err := au.db.GetChallenge(ctx, au.cfg.Profile, id)
	a, err = owned(a, a.AccountID, err, accountID, "challenge", "this challenge belongs to another account's authorization")
	return c, a, err
}

// DeactivateAuthz deactivates a pending or valid authorization (RFC 8555
// §7.5.2), not one past its expiry, and returns it as it then stands.
func (au *Authority) DeactivateAuthz(ctx context.Context, a store.Authz) (store.Authz, error) {
	err := au.db.DeactivateAuthz(ctx, a.ID, au.clock.Now())
	if errors.Is(err, store.ErrWrongState) {
		return a, problem.MalformedF("only a pending or valid authorization can be deactivated; this one is %s", au.AuthzStatus(a))
	}
	if err != nil {
		return a, err
	}
	return au.db.GetAuthz(ctx, au.cfg.Profile, a.ID)
}

// AnswerChallenge takes a client's answer to a pending challenge c of
// authorization a (RFC 8555 §7.5.1), keyThumbprint being the signing
// account key's: the validation is tried at once, within the request,
// else handed to a challenge_validate job. It returns the challenge as it
// then stands (processing while the job runs). cl is the answering
// client, for the audit row of a failed validation.
//
// Answers to one challenge that arrive while its validation is under way
// here, or soon after it ended (a client, or a fleet of them, posting it
// more than once at once: each read the challenge pending before the
// first was recorded), share that validation: the first runs it, the
// others wait for its outcome and are answered the challenge it left, so
// that the client's server is asked once. One that ends in an error
// hands the challenge to the next, which tries in its turn.
func (au *Authority) AnswerChallenge(ctx context.Context, c store.Challenge, a store.Authz, keyThumbprint string, cl Client) (store.Challenge, error) {
	id := c.ID
	for {
		call, first := au.answers.join(id)
		if first {
			c, err := au.answerChallenge(ctx, c, a, keyThumbprint, cl)
			au.answers.leave(id, call, c, err)
			return c, err
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return c, ctx.Err()
		}
		if call.err == nil {
			return call.c, nil
		}
		// The first one failed: take the challenge as it now stands.
		var err error
		if c, a, err = au.db.GetChallenge(ctx, au.cfg.Profile, id); err != nil {
			return c, err
		}
		if c.Status != acme.StatusPending {
			return c, nil
		}
	}
}

// answerKept is how long an answer's outcome is kept for the answers to
// the same challenge that read it pending before it was recorded and
// arrive after. Later ones read the challenge as it was left.
const answerKept = 5 * time.Second

// answering is the challenges being answered in this process, by id,
// each with its outcome once there is one (kept answerKept).
type answering struct {
	mu sync.Mutex
	m  map[string]*answerCall
}

type answerCall struct {
	done chan struct{} // closed when c and err are set
	c    store.Challenge
	err  error
}

// join returns the answer under way for challenge id; first is true when
// there was none, and the caller's is now it (see leave).
func (w *answering) join(id string) (call *answerCall, first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if call, ok := w.m[id]; ok {
		return call, false
	}
	if w.m == nil {
		w.m = map[string]*answerCall{}
	}
	call = &answerCall{done: make(chan struct{})}
	w.m[id] = call
	return call, true
}

// leave ends the answer call to challenge id with its outcome, which
// stays there for answerKept unless it is an error.
func (w *answering) leave(id string, call *answerCall, c store.Challenge, err error) {
	forget := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.m[id] == call {
			delete(w.m, id)
		}
	}
	if err != nil {
		forget() // before the waiting ones wake: the next of them goes first
	} else {
		time.AfterFunc(answerKept, forget)
	}
	call.c, call.err = c, err
	close(call.done)
}

// answerChallenge is AnswerChallenge's one answer.
func (au *Authority) answerChallenge(ctx context.Context, c store.Challenge, a store.Authz, keyThumbprint string, cl Client) (store.Challenge, error) {
	switch st := au.AuthzStatus(a); st {
	case acme.StatusPending:
	case acme.StatusValid:
		// Another of its challenges proved it (a client answering every
		// type it supports, or two of its processes racing): the answer
		// is a no-op, the challenge returned as it stands, as Boulder
		// does — a refusal would read to the client as its order failing.
		return c, nil
	default:
		return c, problem.MalformedF("the authorization is %s; its challenges can no longer be answered", st)
	}
	// Validate right here first, with nothing stored yet: most answers
	// settle within a moment, and one that does is recorded in a single
	// durable write, with no job to store, run and settle. A crash
	// meanwhile leaves the challenge pending and the client without an
	// answer, free to post again.
	settled, late, err := au.validateInline(ctx, &c, a, keyThumbprint, cl)
	if err != nil || settled {
		return c, err
	}
	// After an attempt that ran out of time, the client is not kept
	// waiting a second time.
	wait := inlineValidationWait
	if late {
		wait = 0
	}
	if err := au.validateByJob(ctx, c, a, wait, cl); err != nil {
		return c, err
	}
	c, _, err = au.db.GetChallenge(ctx, au.cfg.Profile, c.ID)
	return c, err
}

// validateByJob hands a challenge's validation to a durable job: for one
// that did not settle inline (slow, failing on our side, or too many at
// once). The job is stored first, then the challenge flipped: a crash in
// between leaves a job that finds the challenge pending and validates it
// anyway, never a challenge in processing with nobody to finish it. The
// job starts at once, and an attempt that ends within wait is answered in
// this response; a slower one goes on in the background and the client
// polls as usual.
func (au *Authority) validateByJob(ctx context.Context, c store.Challenge, a store.Authz, wait time.Duration, cl Client) error {
	_, done, err := au.queue.RunNow(ctx, jobs.Spec{
		Kind: ValidateKind, Key: c.ID,
		Payload:     validatePayload{Profile: au.cfg.Profile, Challenge: c.ID, ClientIP: cl.IP, UserAgent: cl.UserAgent},
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
	if c, _, err = au.db.GetChallenge(ctx, au.cfg.Profile, c.ID); err != nil {
		return err
	}
	if !done || c.Status == acme.StatusPending {
		if _, err := au.db.StartChallenge(ctx, c.ID, au.clock.Now()); err != nil {
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
func (au *Authority) validateInline(ctx context.Context, c *store.Challenge, a store.Authz, keyThumbprint string, cl Client) (settled, late bool, err error) {
	select {
	case au.inline <- struct{}{}:
		defer func() { <-au.inline }()
	default:
		return false, false, nil
	}
	ictx, cancel := context.WithTimeout(ctx, inlineValidationWait)
	verr := au.runValidator(ictx, *c, a, c.Token+"."+keyThumbprint)
	late = ictx.Err() != nil
	cancel()
	if late {
		return false, true, nil
	}
	if _, ok := problem.As(verr); verr != nil && !ok {
		return false, false, nil // our fault: the job retries it
	}
	now, mine, err := au.recordValidation(ctx, *c, a, verr, cl)
	if err != nil {
		return false, false, err
	}
	if !mine { // settled meanwhile by someone else: read what they wrote
		if *c, _, err = au.db.GetChallenge(ctx, au.cfg.Profile, c.ID); err != nil {
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
	// The client that answered the challenge, for the audit row of a
	// failed validation; empty in a job re-queued at start.
	ClientIP  string `json:"client_ip,omitempty"`
	UserAgent string `json:"user_agent,omitempty"`
}

// RunValidation runs one validation of a challenge and records the
// result: one attempt of its challenge_validate job. cl is the client
// that answered the challenge, when known.
func (au *Authority) RunValidation(ctx context.Context, challengeID string, cl Client) jobs.Outcome {
	c, a, err := au.db.GetChallenge(ctx, au.cfg.Profile, challengeID)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Failed("challenge not found")
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	now := au.clock.Now()
	switch {
	case c.Status != acme.StatusPending && c.Status != acme.StatusProcessing:
		// Settled already (a repeated job, or one that outlived a crash).
		return jobs.Done()
	case !now.Before(a.Expires):
		if _, err := au.failUnjudged(ctx, c, a, problem.UnauthorizedF("the authorization expired before it was validated"), cl); err != nil {
			return jobs.Retry(err.Error())
		}
		return jobs.Done()
	}
	acct, err := au.db.GetAccount(ctx, au.cfg.Profile, a.AccountID)
	if err != nil {
		return jobs.Retry(err.Error())
	}
	// A fault on our side is no verdict: recordValidation refuses it, and
	// the job tries again.
	verr := au.runValidator(ctx, c, a, c.Token+"."+acct.Thumbprint)
	if _, _, err := au.recordValidation(ctx, c, a, verr, cl); err != nil {
		// An attempt cut short (the runner stopping, the job taken over)
		// made no validation query to note.
		if _, verdict := problem.As(verr); verr != nil && !verdict && ctx.Err() == nil {
			au.noteRetry(ctx, c)
		}
		return jobs.Retry(err.Error())
	}
	return jobs.Done()
}

// noteRetry tells the client of a challenge that its validation attempt
// failed on our side and is tried again (RFC 8555 §8.2: the server MUST
// add an entry to the challenge's error after each failed validation
// query, and the challenge stays processing while it retries). What
// failed is the operator's to see, in the job's last error.
func (au *Authority) noteRetry(ctx context.Context, c store.Challenge) {
	body, _ := json.Marshal(problem.InternalF("a validation attempt could not be completed on the server's side; the server tries again"))
	if err := au.db.NoteChallengeRetry(ctx, c.ID, body, au.clock.Now()); err != nil {
		au.log.Warn("noting a validation retry", zap.String("event", "challenge_retry_note_failed"),
			zap.String("profile", au.cfg.Profile), zap.String("challenge", c.ID), zap.Error(err))
	}
}

// ChallengeRetryAfter is when a client should look at the processing
// challenge c again (RFC 8555 §8.2: after the server's next validation
// attempt): the wait of its validation job for that attempt, rounded up
// to whole seconds, else a second (an attempt under way or due).
func (au *Authority) ChallengeRetryAfter(ctx context.Context, c store.Challenge) time.Duration {
	d, next, err := au.queue.NextAttempt(ctx, ValidateKind, c.ID, au.clock.Now())
	if err != nil || next != jobs.NextWaiting {
		return minProcessingRetryAfter
	}
	return retryAfterOf(d)
}

// recordValidation settles a challenge with a validation's verdict: nil
// for the expected answer, else the problem with the client's answer,
// audited (challenge_failed, by the authorization's account, from cl)
// and notified in the same write. It returns the challenge as recorded;
// mine is false when someone else settled it meanwhile, which is left as
// it is.
func (au *Authority) recordValidation(ctx context.Context, c store.Challenge, a store.Authz, verdict error, cl Client) (now store.Challenge, mine bool, err error) {
	prob, ok := problem.As(verdict)
	if verdict != nil && !ok {
		return c, false, fmt.Errorf("validating %s: %w", c.Type, verdict) // a fault, not a verdict
	}
	var (
		body []byte
		res  store.ChallengeResult
	)
	at := au.clock.Now()
	if prob != nil {
		res, body, err = au.failChallengeAudited(ctx, c, a, prob, cl, at)
	} else {
		res, err = au.db.CompleteChallenge(ctx, c.ID, true, nil, at)
	}
	if errors.Is(err, store.ErrWrongState) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	outcome := acme.StatusValid
	if prob != nil {
		outcome = acme.StatusInvalid
		au.spendFailedValidation(ctx, a)
	}
	au.metrics.Validated(au.cfg.Profile, c.Type, string(outcome))
	fields := []zap.Field{zap.String("profile", au.cfg.Profile), zap.String("order", res.OrderID),
		zap.String("challenge", c.ID), zap.String("type", c.Type), zap.String("identifier", a.Identifier.Value)}
	if prob != nil {
		au.log.Info("challenge failed", append(fields, zap.String("event", acme.EventChallengeFailed), zap.String("problem", prob.Detail))...)
	} else {
		au.log.Debug("challenge valid", append(fields, zap.String("event", "challenge_valid"), zap.String("order_status", string(res.OrderStatus)))...)
	}
	// What CompleteChallenge made of it.
	if prob == nil {
		c.Status, c.Validated, c.Error = acme.StatusValid, at, nil
	} else {
		c.Status, c.Validated, c.Error = acme.StatusInvalid, time.Time{}, body
	}
	return c, true, nil
}

// FailAbandoned makes the challenge challengeID of this profile invalid
// with a serverInternal problem: its validation job spent its attempts
// on faults of our side (or outlived its authorization), and no answer
// of the client's was judged. See failUnjudged. A challenge settled
// already, or gone, is left as it is (settled false).
func (au *Authority) FailAbandoned(ctx context.Context, challengeID string, cl Client) (settled bool, err error) {
	c, a, err := au.db.GetChallenge(ctx, au.cfg.Profile, challengeID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return au.failUnjudged(ctx, c, a, problem.Internal(), cl)
}

// failUnjudged makes challenge c invalid with prob when its validation
// was not carried out — its authorization expired first, or every
// attempt failed on our side — which makes its authorization and order
// invalid too: audited and notified as challenge_failed, in the same
// write, as a failed validation is, so that the trail says why the order
// failed and the problem's type (serverInternal, unauthorized) says it
// was no wrong answer; but not counted among the account's failed
// validations, which limit answers judged wrong. A challenge settled
// already is left as it is (settled false).
func (au *Authority) failUnjudged(ctx context.Context, c store.Challenge, a store.Authz, prob *problem.Problem, cl Client) (settled bool, err error) {
	if _, _, err := au.failChallengeAudited(ctx, c, a, prob, cl, au.clock.Now()); err != nil {
		if errors.Is(err, store.ErrWrongState) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// failChallengeAudited makes challenge c invalid at at with prob, naming the
// authorization's identifier, and writes its challenge_failed row (by
// the account, from cl) with the row's notifications in the same write,
// handing those to the notifier once it is committed. It returns what
// the write made of the order and the stored problem; ErrWrongState when
// the challenge was settled already (no row, nothing notified).
func (au *Authority) failChallengeAudited(ctx context.Context, c store.Challenge, a store.Authz, prob *problem.Problem, cl Client, at time.Time) (store.ChallengeResult, []byte, error) {
	body := challengeProblem(a, prob)
	ev := au.challengeFailedEvent(ctx, a, c, prob, cl)
	ev.At = at
	ev.Jobs = au.AuditNotifyJobs(ev)
	res, err := au.db.FailChallengeAudited(ctx, c.ID, body, ev)
	if err != nil {
		return res, body, err
	}
	au.Notified(ev.Jobs)
	return res, body, nil
}

// challengeFailedEvent is the audit row of a failed challenge, by the
// authorization's account, from cl: its identifier, the problem's type as
// the reason and the challenge type with the problem's detail as the
// detail. Its notifications carry the same.
func (au *Authority) challengeFailedEvent(ctx context.Context, a store.Authz, c store.Challenge, prob *problem.Problem, cl Client) store.AuditEvent {
	ev := au.event(ctx, acme.EventChallengeFailed, OutcomeFailure, Actor{Kind: ActorAccount, ID: a.AccountID}, cl)
	challengeFailed(&ev, a, c, prob)
	return ev
}

// challengeFailed fills in what the challenge_failed row ev of challenge
// c of authorization a, failed with prob, says of them.
func challengeFailed(ev *store.AuditEvent, a store.Authz, c store.Challenge, prob *problem.Problem) {
	ev.OrderID, ev.AccountID, ev.Identifiers = a.OrderID, a.AccountID, []acme.Identifier{a.Identifier}
	ev.Reason, ev.Detail = string(prob.Type), c.Type+": "+prob.Detail
}

// challengeProblem is the stored error of a challenge of a failed with
// prob: prob naming the authorization's identifier.
func challengeProblem(a store.Authz, prob *problem.Problem) []byte {
	prob.Identifier = &acme.Identifier{Type: a.Identifier.Type, Value: a.Identifier.Value}
	body, _ := json.Marshal(prob)
	return body
}

// failAbandonedUnmounted is FailAbandoned where the challenge's profile
// is not mounted (a validation job retired on an instance whose config
// lacks it, by its deadline or an operator's cancel): the challenge
// becomes invalid with a serverInternal problem, audited as
// challenge_failed in the same write, as failUnjudged does, and its
// notifications are carried by a notify_route job to an instance that
// mounts the profile, where its destinations are known. Without the
// profile's authority the row names no reverse name of the client. A
// challenge settled already, or gone, is left as it is (settled false).
func failAbandonedUnmounted(ctx context.Context, db *store.DB, profile, challengeID string, cl Client, at time.Time) (settled bool, err error) {
	c, a, err := db.GetChallenge(ctx, profile, challengeID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	prob := problem.Internal()
	body := challengeProblem(a, prob)
	ev := store.AuditEvent{At: at, Event: acme.EventChallengeFailed, Outcome: OutcomeFailure, Profile: profile,
		ActorKind: ActorAccount, ActorID: a.AccountID, ClientIP: cl.IP, UserAgent: cl.UserAgent}
	challengeFailed(&ev, a, c, prob)
	ev.Jobs = UnmountedNotifyJobs(ev)
	if _, err := db.FailChallengeAudited(ctx, c.ID, body, ev); err != nil {
		if errors.Is(err, store.ErrWrongState) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// inlineValidationWait is how long a challenge POST waits for its
// validation before answering processing. It bounds how long a slow client
// server can hold the request open.
const inlineValidationWait = time.Second

// validationTimeout bounds one validation attempt.
const validationTimeout = 30 * time.Second

func (au *Authority) runValidator(ctx context.Context, c store.Challenge, a store.Authz, keyAuth string) error {
	ctx, cancel := context.WithTimeout(ctx, validationTimeout)
	defer cancel()
	var err error
	switch c.Type {
	case acme.ChallengeHTTP01:
		err = au.validator.HTTP01(ctx, a.Identifier.Type, a.Identifier.Value, c.Token, keyAuth)
	case acme.ChallengeDNS01:
		err = au.validator.DNS01(ctx, a.Identifier.Value, keyAuth)
	case acme.ChallengeTLSALPN01:
		err = au.validator.TLSALPN01(ctx, a.Identifier.Type, a.Identifier.Value, keyAuth)
	default:
		return problem.MalformedF("challenge type %q is not supported", c.Type)
	}
	if err != nil {
		return err
	}
	// Control is proved; the name's CAA records must let this CA issue
	// for it too, or the challenge fails with their caa problem.
	return au.checkCAA(ctx, a, c.Type)
}
