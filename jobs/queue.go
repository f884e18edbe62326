package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// DefaultMaxAttempts is the attempt budget of a job that names none.
const DefaultMaxAttempts = 8

// Queue is the producer and operator side of the job table: enqueue, list,
// count, cancel, retry. Runners attached to it are woken on every enqueue,
// so work queued in this process starts without waiting for a poll.
type Queue struct {
	db    *store.DB
	clock clock.Clock

	mu      sync.Mutex
	runners []*Runner
}

// NewQueue returns a queue over db. A nil clock means the wall clock.
func NewQueue(db *store.DB, clk clock.Clock) *Queue {
	if clk == nil {
		clk = clock.Real()
	}
	return &Queue{db: db, clock: clk}
}

// Spec describes a job to enqueue.
type Spec struct {
	Kind string
	// Key is the job's identity within its kind: while a job with this kind
	// and key is ready or running, enqueueing another returns it instead.
	// Empty means no identity.
	Key string
	// Lane, when set, is the lane of the job: only runners that serve it
	// (RunnerOptions.Lanes) claim the job. Empty is the default lane,
	// which every runner serves.
	Lane    string
	Payload any // marshalled to JSON; nil means {}
	// RunAt is the earliest time to run; zero means now. Delay, if set, is
	// added to now instead.
	RunAt time.Time
	Delay time.Duration
	// Deadline, if set, is when the work stops being worth doing: a job
	// claimed after it is retired without running.
	Deadline    time.Time
	MaxAttempts int // default DefaultMaxAttempts
	// Rerun, for a job with a key, is for work that must reflect the
	// state as of the enqueue (a CRL rebuilt after a revocation): when
	// the live job with this kind and key is running, its attempt may
	// have read that state before it changed, so it runs once more after
	// that attempt ends done — at this spec's run time at the earliest —
	// instead of settling (see store.DB.EnqueueJob). Without it the
	// running job is returned and nothing more happens.
	Rerun bool
}

// Enqueue stores a ready job, or returns the live job with the same kind
// and key (created=false), and wakes the local runners.
func (q *Queue) Enqueue(ctx context.Context, s Spec) (job Job, created bool, err error) {
	nj, err := q.newJob(s)
	if err != nil {
		return Job{}, false, err
	}
	job, created, err = q.db.EnqueueJob(ctx, nj, q.clock.Now())
	if err != nil {
		return Job{}, false, err
	}
	if created {
		q.wake(s.Kind)
	}
	return job, created, nil
}

// RunNow stores a job and, when a runner in this process handles its kind
// and has a free slot for it under the kind's concurrency cap, starts it
// at once in a goroutine of its own — no claim, no wake-up — and waits up
// to wait for it to settle. A process that dies mid-run leaves a lease
// that expires, and any runner takes it over. done reports whether the
// attempt finished within wait. Without a local runner, with the kind's
// slots all taken, or when a live job with the same kind and key exists,
// it behaves like Enqueue: beyond the cap, work waits in the queue.
//
// The job is stored without an fsync of its own (a lazy write): when the
// attempt completes the job in time, the job is as durable as what its
// handler wrote — a handler whose result matters writes it durably, and
// that makes everything before it durable too. In every other case RunNow
// makes the job durable (store.Flush) before it returns, so a job the
// caller goes on to rely on survives a power loss as one from Enqueue
// does.
func (q *Queue) RunNow(ctx context.Context, s Spec, wait time.Duration) (job Job, done bool, err error) {
	r := q.localRunner(s.Kind, s.Lane)
	var ks *kindState
	if r != nil {
		ks = r.handlers[s.Kind]
	}
	if r == nil || !r.reserve(ks) {
		job, _, err = q.Enqueue(ctx, s)
		return job, false, err
	}
	nj, err := q.newJob(s)
	if err != nil {
		r.unreserve(ks)
		return Job{}, false, err
	}
	now := q.clock.Now()
	job, created, err := q.db.EnqueueJobLeased(ctx, nj, r.opts.Owner, now.Add(ks.lease), now)
	if err != nil || !created {
		r.unreserve(ks)
		return job, false, err
	}
	finished, ok := r.startNow(ks, job)
	if ok {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case completed := <-finished:
			if completed {
				return job, true, nil
			}
			done = true
		case <-t.C:
		case <-ctx.Done():
		}
	}
	// Not ok: the runner is stopping, so the lease is left to expire, as
	// if this process had died, and the next runner takes the job. Either
	// way the job must now outlive a power loss.
	if err := q.db.Flush(context.WithoutCancel(ctx)); err != nil {
		return job, done, fmt.Errorf("jobs: making job %d durable: %w", job.ID, err)
	}
	return job, done, nil
}

func (q *Queue) localRunner(kind, lane string) *Runner {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range q.runners {
		if _, ok := r.handlers[kind]; ok && r.serves(lane) {
			return r
		}
	}
	return nil
}

// newJob turns a Spec into the row to store.
func (q *Queue) newJob(s Spec) (store.NewJob, error) {
	var payload []byte
	if s.Payload != nil {
		var err error
		if payload, err = json.Marshal(s.Payload); err != nil {
			return store.NewJob{}, fmt.Errorf("jobs: encoding %s payload: %w", s.Kind, err)
		}
	}
	now := q.clock.Now()
	runAt := s.RunAt
	if s.Delay > 0 {
		runAt = now.Add(s.Delay)
	}
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	return store.NewJob{Kind: s.Kind, Key: s.Key, Lane: s.Lane, Payload: payload, RunAt: runAt, Deadline: s.Deadline, MaxAttempts: s.MaxAttempts,
		Rerun: s.Rerun}, nil
}

// Get reads one job.
func (q *Queue) Get(ctx context.Context, id int64) (Job, error) { return q.db.GetJob(ctx, id) }

// Next is what NextAttempt finds of a job's next attempt.
type Next int

const (
	// NextNone: no live job, only settled ones or none at all; nothing
	// will run until someone queues the work again.
	NextNone Next = iota
	// NextDue: the job is ready and due, waiting for a worker to claim it.
	NextDue
	// NextWaiting: the job is ready and waits for a later attempt (a
	// retry's backoff, a delay it was queued with).
	NextWaiting
	// NextRunning: an attempt runs now, in any process.
	NextRunning
)

// NextAttempt says when the newest job of kind and key runs next, for a
// caller that tells its client how long to wait: next is what that job
// is doing, and wait, when it is NextWaiting, the time from now until its
// next attempt. An error (the store not answering) says nothing about
// the job.
func (q *Queue) NextAttempt(ctx context.Context, kind, key string, now time.Time) (wait time.Duration, next Next, err error) {
	js, err := q.db.ListJobs(ctx, store.JobFilter{Kind: kind, Key: key, Limit: 1})
	if err != nil {
		return 0, NextNone, err
	}
	if len(js) == 0 {
		return 0, NextNone, nil
	}
	switch j := js[0]; {
	case j.Status == store.JobRunning:
		return 0, NextRunning, nil
	case j.Status == store.JobReady && j.RunAt.After(now):
		return j.RunAt.Sub(now), NextWaiting, nil
	case j.Status == store.JobReady:
		return 0, NextDue, nil
	}
	return 0, NextNone, nil
}

// List returns jobs newest first.
func (q *Queue) List(ctx context.Context, f store.JobFilter) ([]Job, error) {
	return q.db.ListJobs(ctx, f)
}

// Count counts jobs by kind and status.
func (q *Queue) Count(ctx context.Context) ([]store.JobCount, error) { return q.db.CountJobs(ctx) }

// Cancel retires a job for an operator. A waiting job is cancelled now,
// as the answer and every read of it says, and owes its handler's
// Abandon: a runner of its kind — this process's, woken at once, or any
// other instance's — claims it, runs Abandon, trying again through an
// outage as for any retired job (RunnerOptions.AbandonRetry), and then
// records it done; Cancel does not wait for it. A running job finishes
// its current attempt and is then retired instead of retried (it may
// still succeed). Cancelling a settled job, or a Periodic handler's row
// (IsPeriodic), is an error wrapping store.ErrWrongState.
func (q *Queue) Cancel(ctx context.Context, id int64) (Job, error) {
	return q.CancelAudited(ctx, id, nil)
}

// CancelAudited is Cancel with the audit row audit makes of the job as
// the cancel left it, stored in the cancel's transaction (see
// store.CancelJobAudited): a cancel whose row cannot be written changes
// nothing.
func (q *Queue) CancelAudited(ctx context.Context, id int64, audit func(Job) store.AuditEvent) (Job, error) {
	if cur, err := q.db.GetJob(ctx, id); err != nil {
		return Job{}, err
	} else if IsPeriodic(cur) {
		return Job{}, fmt.Errorf("%w: job %d (%s) is recurring housekeeping, which is not cancelled; retry runs it now",
			store.ErrWrongState, id, cur.Kind)
	}
	job, err := q.db.CancelJobAudited(ctx, id, q.clock.Now(), audit)
	if err != nil {
		return Job{}, err
	}
	if job.AbandonOwed {
		q.wake(job.Kind)
	}
	return job, nil
}

const cancelledReason = "cancelled by an operator"

// RetryNow makes a job run at once: a waiting job skips its backoff; a
// failed or cancelled job is revived with a fresh attempt budget.
func (q *Queue) RetryNow(ctx context.Context, id int64) (Job, error) {
	return q.RetryNowAudited(ctx, id, nil)
}

// RetryNowAudited is RetryNow with the audit row audit makes of the job
// as the retry left it, stored in the retry's transaction (see
// store.RetryJobNowAudited).
func (q *Queue) RetryNowAudited(ctx context.Context, id int64, audit func(Job) store.AuditEvent) (Job, error) {
	job, err := q.db.RetryJobNowAudited(ctx, id, q.clock.Now(), audit)
	if err != nil {
		return Job{}, err
	}
	q.wake(job.Kind)
	return job, nil
}

func (q *Queue) attach(r *Runner) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.runners = append(q.runners, r)
}

func (q *Queue) detach(r *Runner) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.runners {
		if x == r {
			q.runners = append(q.runners[:i], q.runners[i+1:]...)
			return
		}
	}
}

func (q *Queue) wake(kind string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range q.runners {
		r.wakeKind(kind)
	}
}

// Wake tells the local runners that jobs of kind were stored by a write
// other than Enqueue (one that stored them with the state change owing
// them), so they start without waiting for a poll.
func (q *Queue) Wake(kind string) { q.wake(kind) }
