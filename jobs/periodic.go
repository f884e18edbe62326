package jobs

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// Periodic is a Handler for housekeeping that runs every Every: one row per
// kind (the kind is also the key), enqueued by Recover at start, rescheduled
// after each run. A failed round is tried again after Every too, so
// housekeeping never retires itself.
type Periodic struct {
	Name  string
	Every time.Duration
	Do    func(ctx context.Context) error
	// Lane, when set, is the lane the periodic row lives in, so that only
	// runners serving it run the work (see Spec.Lane).
	Lane string
}

// Kind is the periodic job's name.
func (p *Periodic) Kind() string { return p.Name }

// Run does one round. A round that panics is a failed one: left to the
// runner, the panic would spend an attempt, and the housekeeping would
// retire itself once the budget ran out.
func (p *Periodic) Run(ctx context.Context, _ *Job) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			out = RetryAfter(fmt.Sprintf("handler panicked: %v", v), p.Every)
			out.panicked = &recovered{value: v, stack: string(debug.Stack())}
		}
	}()
	if err := p.Do(ctx); err != nil {
		return RetryAfter(err.Error(), p.Every)
	}
	return Reschedule(p.Every)
}

// Recover makes sure the periodic row exists, in the handler's lane (a
// row stored before the handler named one, or by a handler naming
// another, is moved to it).
func (p *Periodic) Recover(ctx context.Context, q *Queue) error {
	job, created, err := q.Enqueue(ctx, Spec{Kind: p.Name, Key: p.Name, Lane: p.Lane})
	if err != nil {
		return fmt.Errorf("scheduling %s: %w", p.Name, err)
	}
	if !created && job.Lane != p.Lane {
		if _, err := q.db.MoveJobLane(ctx, p.Name, p.Name, p.Lane, q.clock.Now()); err != nil {
			return fmt.Errorf("scheduling %s: %w", p.Name, err)
		}
	}
	return nil
}

// Abandon does nothing: periodic work is never retired (an operator may
// not cancel it, see IsPeriodic; a row an older version let an operator
// cancel is scheduled again at the next start).
func (p *Periodic) Abandon(context.Context, *Job, string) error { return nil }

// IsPeriodic reports whether job is a Periodic handler's row: its key is
// its kind, which no other job's is. Such a row is the housekeeping itself
// (a CRL's refresh, the sweeps): cancelling it would stop that work on
// every instance until the next start, so Queue.Cancel refuses to.
func IsPeriodic(job Job) bool { return job.Key == job.Kind }

// SweepKind is the kind of the job that prunes settled jobs.
const SweepKind = "jobs_sweep"

// NewSweep returns the periodic job that deletes jobs settled more than
// retention ago, every interval.
func NewSweep(q *Queue, retention, every time.Duration) *Periodic {
	return &Periodic{
		Name:  SweepKind,
		Every: every,
		Do: func(ctx context.Context) error {
			_, err := q.db.PruneJobs(ctx, q.clock.Now().Add(-retention))
			return err
		},
	}
}
