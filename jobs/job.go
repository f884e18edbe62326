// Package jobs runs slow or fallible work as durable jobs: rows in the store
// that survive crashes, restarts and config reloads, claimed under a lease by
// a Runner and settled by a guarded write. It knows nothing about what the
// work is; callers register a Handler per kind.
package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Job is one stored job, as a handler receives it. Attempts counts this run.
type Job = store.Job

// Decode unmarshals a job's JSON payload into v.
func Decode(job *Job, v any) error {
	if err := json.Unmarshal(job.Payload, v); err != nil {
		return fmt.Errorf("jobs: decoding %s job %d payload: %w", job.Kind, job.ID, err)
	}
	return nil
}

// Handler does the work of one kind of job.
//
// Run MUST honour ctx: it is cancelled when the runner stops and the bound
// for running handlers passes, and when another runner has taken the job
// over (its lease lapsed unrenewed). Abandon and Recover run with a
// context of their own and should be quick.
type Handler interface {
	// Kind names the jobs this handler runs, e.g. "challenge_validate".
	Kind() string
	// Run does one attempt and says how it went.
	Run(ctx context.Context, job *Job) Outcome
	// Recover runs once when a runner starts, before it claims anything;
	// a handler re-queues here work that a crash may have left unqueued.
	Recover(ctx context.Context, q *Queue) error
	// Abandon is called when the job is retired without success: Failed,
	// attempts exhausted, deadline passed, or cancelled by an operator.
	// reason is for the operator; it is also stored on the job.
	//
	// An error says the side effects could not all be written (the
	// database is away) and trying again may succeed: the runner calls
	// Abandon again, with backoff, and retires the job only once it
	// returned nil (or AbandonRetry passed, or the runner stopped: then
	// the job is left to be reclaimed). So Abandon may run more than once
	// for one retirement — tried again after an error, or again when the
	// job is reclaimed after a crash before its retirement was recorded —
	// and its side effects must be idempotent: guarded writes, or rows
	// keyed by AbandonKey. A panic is logged and taken as done.
	Abandon(ctx context.Context, job *Job, reason string) error
}

// AbandonKey names one retirement of job, for the side effects of its
// Abandon: the same for every run of Abandon for that retirement (tried
// again, or run again after a crash), different for another job, and for
// the same job's next retirement once an operator revived it.
func AbandonKey(job *Job) string {
	return fmt.Sprintf("job/%d/%d", job.ID, job.Revivals)
}

// Leaser is implemented by handlers whose attempts need a lease other than
// the runner's default. The runner renews the lease while Run works, so this
// bounds how long a dead process's job waits before another takes it over.
type Leaser interface {
	Lease() time.Duration
}

// Limiter is implemented by handlers that cap how many of their jobs one
// runner runs at once.
type Limiter interface {
	Concurrency() int
}

type outcomeKind int

const (
	outcomeDone outcomeKind = iota + 1
	outcomeRetry
	outcomeRetryAfter
	outcomeFailed
	outcomeReschedule
)

// Outcome is what a handler says about one attempt.
type Outcome struct {
	kind   outcomeKind
	reason string
	after  time.Duration
	spend  bool // a retry_after that spends its attempt (RetryNoSooner)
	// panicked is the panic the handler recovered from itself to give
	// this outcome (see Periodic.Run), for the runner to log.
	panicked *recovered
}

// recovered is a panic and the stack it was raised on.
type recovered struct {
	value any
	stack string
}

// Done: the work is finished.
func Done() Outcome { return Outcome{kind: outcomeDone} }

// Retry: a transient failure; try again after the runner's backoff
// (base·2^(attempt−1) with jitter, capped). It spends one attempt.
func Retry(reason string) Outcome { return Outcome{kind: outcomeRetry, reason: reason} }

// RetryAfter: try again after d, as someone else asked (a rate limit, a
// Retry-After header). It does not spend the attempt budget.
func RetryAfter(reason string, d time.Duration) Outcome {
	return Outcome{kind: outcomeRetryAfter, reason: reason, after: d}
}

// RetryNoSooner: a transient failure whose other side said when to come
// back (a Retry-After header): try again after d or the runner's backoff,
// whichever is later. Unlike RetryAfter it spends one attempt, as Retry
// does, so a side that keeps asking for a short pause does not have the
// job tried every few moments until its deadline.
func RetryNoSooner(reason string, d time.Duration) Outcome {
	return Outcome{kind: outcomeRetryAfter, reason: reason, after: d, spend: true}
}

// Failed: a permanent failure; the job is retired and abandoned.
func Failed(reason string) Outcome { return Outcome{kind: outcomeFailed, reason: reason} }

// Reschedule: this round of periodic work is done; run again after d with a
// fresh attempt budget.
func Reschedule(d time.Duration) Outcome { return Outcome{kind: outcomeReschedule, after: d} }

// Kind names the outcome, for metrics: "done", "retry", "retry_after",
// "failed", "reschedule" (or "invalid" for the zero Outcome).
func (o Outcome) Kind() string {
	switch o.kind {
	case outcomeDone:
		return "done"
	case outcomeRetry:
		return "retry"
	case outcomeRetryAfter:
		return "retry_after"
	case outcomeFailed:
		return "failed"
	case outcomeReschedule:
		return "reschedule"
	}
	return "invalid"
}

func (o Outcome) String() string {
	switch o.kind {
	case outcomeDone:
		return "done"
	case outcomeRetry:
		return "retry: " + o.reason
	case outcomeRetryAfter:
		return fmt.Sprintf("retry after %s: %s", o.after, o.reason)
	case outcomeFailed:
		return "failed: " + o.reason
	case outcomeReschedule:
		return fmt.Sprintf("reschedule in %s", o.after)
	}
	return "invalid outcome"
}
