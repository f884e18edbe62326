package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// JobStatus is where a job is in its life.
type JobStatus string

// Job statuses. ready and running are "live"; the rest are settled.
const (
	JobReady     JobStatus = "ready"
	JobRunning   JobStatus = "running"
	JobDone      JobStatus = "done"
	JobFailed    JobStatus = "failed"
	JobCancelled JobStatus = "cancelled"
)

// Job is one row of the jobs table.
type Job struct {
	ID   int64
	Kind string
	Key  string // "" when the job has no identity
	// Lane is "" for a job any runner may claim, or the name of the lane
	// a runner must serve to claim it (see ClaimJobsIn).
	Lane        string
	Payload     []byte // JSON
	Status      JobStatus
	Attempts    int // runs started, less those refunded (explicit-delay retries, releases)
	MaxAttempts int
	RunAt       time.Time
	Deadline    time.Time // zero: none
	LeaseOwner  string
	LeaseUntil  time.Time
	LastError   string
	// CancelRequested: an operator cancelled the job while it ran; it is
	// retired instead of retried when the current attempt ends.
	CancelRequested bool
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time
	// Revivals counts the operator's revivals of the job once retired
	// (RetryJobNow of a failed or cancelled job): each later retirement
	// is a new one, which jobs.AbandonKey tells apart.
	Revivals int
	// AbandonOwed: an operator cancelled the job while it waited; it is
	// settled as cancelled, and its handler's Abandon has not yet
	// succeeded. A runner of its kind claims it for that (ClaimJobsIn),
	// leaving it cancelled, and clears the debt (SettleJobAbandon).
	AbandonOwed bool
}

// NewJob describes a job to enqueue.
type NewJob struct {
	Kind        string
	Key         string // "" for no identity: every enqueue makes a row
	Lane        string // "" for any runner
	Payload     []byte // JSON; nil means {}
	RunAt       time.Time
	Deadline    time.Time // zero: none
	MaxAttempts int
	// Rerun: when the live job this enqueue finds is running, it is run
	// again after its current attempt (see EnqueueJob).
	Rerun bool
}

const jobCols = `id, kind, key, lane, payload, status, attempts, max_attempts, run_at, deadline,
	lease_owner, lease_until, last_error, cancel_requested, created_at, updated_at, finished_at, revivals, abandon_owed`

type rowScanner interface{ Scan(dest ...any) error }

func scanJob(r rowScanner) (Job, error) {
	var (
		j                              Job
		key, owner                     sql.NullString
		payload                        string
		runAt, created, updated        int64
		deadline, leaseUntil, finished sql.NullInt64
		cancel, owed                   int
	)
	if err := r.Scan(&j.ID, &j.Kind, &key, &j.Lane, &payload, &j.Status, &j.Attempts, &j.MaxAttempts, &runAt, &deadline,
		&owner, &leaseUntil, &j.LastError, &cancel, &created, &updated, &finished, &j.Revivals, &owed); err != nil {
		return Job{}, err
	}
	j.Key, j.LeaseOwner, j.Payload = key.String, owner.String, []byte(payload)
	j.RunAt, j.CreatedAt, j.UpdatedAt = ms(runAt), ms(created), ms(updated)
	j.Deadline, j.LeaseUntil, j.FinishedAt = nullMs(deadline), nullMs(leaseUntil), nullMs(finished)
	j.CancelRequested, j.AbandonOwed = cancel != 0, owed != 0
	return j, nil
}

func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullMs(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return ms(v.Int64)
}

func msOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func strOrNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// EnqueueJob inserts a ready job, unless a live (ready or running) job with
// the same kind and key exists: then it returns that one and created=false.
// The live job's uniqueness is the jobs table's partial unique index, which
// PostgreSQL enforces across concurrent transactions at any isolation (an
// insert waits for a concurrent one of the same kind and key, and then
// conflicts with it or not); see enqueueTx for a live job settled at once.
//
// With nj.Rerun, a live job found running is asked to run once more: its
// attempt began before this enqueue, and may have read the state the
// enqueue is for before it changed (a CRL built from the revocations
// committed before one more). Its rerun_at is set to nj's run time (the
// earliest of those asked for), and the write that records the attempt
// done makes the job ready again at it (CompleteJob) instead. Any other
// way the attempt ends has the job run again anyway (a retry, a
// reschedule, a release: the request is met by that run) or retires it
// (failed, cancelled: the request goes with it).
func (db *DB) EnqueueJob(ctx context.Context, nj NewJob, now time.Time) (job Job, created bool, err error) {
	return db.enqueueJob(ctx, nj, "", time.Time{}, now, false)
}

// EnqueueJobLeased is EnqueueJob for a job its caller runs at once: a new
// row is stored already running, at attempt 1, leased to owner until
// leaseUntil — as if claimed, without a claim's extra write. If the caller
// dies, the lease expires and any runner takes the job over.
//
// The row is a lazy write (see engine): it survives a crash of the
// process at once, and a power loss once any durable write follows — the
// running job's own, or the caller's Flush.
func (db *DB) EnqueueJobLeased(ctx context.Context, nj NewJob, owner string, leaseUntil, now time.Time) (Job, bool, error) {
	return db.enqueueJob(ctx, nj, owner, leaseUntil, now, true)
}

func (db *DB) enqueueJob(ctx context.Context, nj NewJob, owner string, leaseUntil, now time.Time, lazy bool) (job Job, created bool, err error) {
	write := db.withTx
	if lazy {
		write = db.withLazyTx
	}
	err = write(ctx, func(tx *sql.Tx) error {
		job, created, err = db.enqueueTx(ctx, tx, nj, owner, leaseUntil, now)
		return err
	})
	return job, created, err
}

// enqueueTx is enqueueJob inside tx, for writes that store jobs together
// with the state change that owes them (see AuditEvent.Jobs).
func (db *DB) enqueueTx(ctx context.Context, tx *sql.Tx, nj NewJob, owner string, leaseUntil, now time.Time) (job Job, created bool, err error) {
	if nj.Kind == "" {
		return Job{}, false, errors.New("store: job kind is empty")
	}
	if nj.MaxAttempts <= 0 {
		return Job{}, false, fmt.Errorf("store: job max attempts must be positive, got %d", nj.MaxAttempts)
	}
	payload := "{}"
	if nj.Payload != nil {
		payload = string(nj.Payload)
	}
	runAt := nj.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	status, attempts := "ready", 0
	if owner != "" {
		status, attempts = "running", 1
	}
	insert := db.q(`INSERT INTO jobs (kind, key, lane, payload, status, attempts, max_attempts, run_at, deadline,
			lease_owner, lease_until, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING
		RETURNING ` + jobCols)
	live := db.q(`SELECT ` + jobCols + ` FROM jobs WHERE kind = ? AND key = ? AND status IN ('ready','running')`)
	rerun := db.q(`UPDATE jobs SET rerun_at = CASE WHEN rerun_at IS NULL OR rerun_at > ? THEN ? ELSE rerun_at END
		WHERE id = ? AND status = 'running' RETURNING ` + jobCols)
	for range enqueueTries {
		job, err = scanJob(tx.QueryRowContext(ctx, insert, nj.Kind, strOrNull(nj.Key), nj.Lane, payload, status, attempts, nj.MaxAttempts,
			runAt.UnixMilli(), msOrNull(nj.Deadline), strOrNull(owner), msOrNull(leaseUntil), now.UnixMilli(), now.UnixMilli()))
		if err == nil {
			if owner == "" {
				if err := db.announce(ctx, tx, nj.Kind); err != nil {
					return Job{}, false, fmt.Errorf("store: enqueue %s: announcing it: %w", nj.Kind, err)
				}
			}
			return job, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Job{}, false, fmt.Errorf("store: enqueue %s: %w", nj.Kind, err)
		}
		// The insert conflicted with the live job for this kind and key.
		// SQLite's writer is alone, so it is still there; on PostgreSQL
		// (READ COMMITTED) its runner may have settled it since, and then
		// the insert is tried again, the conflicting row no longer live.
		job, err = scanJob(tx.QueryRowContext(ctx, live, nj.Kind, nj.Key))
		if err == nil && nj.Rerun && job.Status == JobRunning {
			// Guarded on its still running: on PostgreSQL the write that
			// records its attempt may commit first (this update waits for
			// it), and then the job is not live any more and the insert
			// is tried again.
			job, err = scanJob(tx.QueryRowContext(ctx, rerun, runAt.UnixMilli(), runAt.UnixMilli(), job.ID))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return Job{}, false, fmt.Errorf("store: enqueue %s: asking the running job to run again: %w", nj.Kind, err)
			}
		}
		if err == nil {
			return job, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Job{}, false, fmt.Errorf("store: enqueue %s: reading live job: %w", nj.Kind, err)
		}
	}
	return Job{}, false, fmt.Errorf("store: enqueue %s: the live job of key %q settled %d times while it was enqueued", nj.Kind, Clip(nj.Key, 64), enqueueTries)
}

// enqueueTries bounds the inserts of an enqueue whose live job keeps
// settling between its insert and its read.
const enqueueTries = 8

// WatchJobs calls wake with the kind of each ready job another instance
// on this database enqueues, moments after it commits, and with "" after
// a lapse in which some may have been missed, until ctx ends. It blocks
// meanwhile. On SQLite, which has no such signal, it returns at once:
// runners there find other processes' jobs by polling, as they find them
// everywhere when the signal is lost.
func (db *DB) WatchJobs(ctx context.Context, wake func(kind string)) {
	db.eng.watchJobs(ctx, wake)
}

// enqueueAll stores jobs inside tx (see enqueueTx).
func (db *DB) enqueueAll(ctx context.Context, tx *sql.Tx, jobs []NewJob, now time.Time) error {
	for _, nj := range jobs {
		if _, _, err := db.enqueueTx(ctx, tx, nj, "", time.Time{}, now); err != nil {
			return err
		}
	}
	return nil
}

// ClaimJobs is ClaimJobsIn for a runner that serves no lane but the
// default one.
func (db *DB) ClaimJobs(ctx context.Context, kind, owner string, now, leaseUntil time.Time, limit int) ([]Job, error) {
	return db.ClaimJobsIn(ctx, kind, nil, owner, now, leaseUntil, limit)
}

// ClaimJobsIn leases up to limit jobs of one kind that are due (ready with
// run_at reached) or abandoned (running with an expired lease held by
// another owner — a job whose lease the claimer itself let lapse is still
// running there), in one atomic statement, and counts the attempt. Only
// jobs of the default lane ("") and of lanes are claimed: a job of any
// other lane is left for a runner that serves it.
//
// Cancelled jobs whose Abandon is owed (AbandonOwed), unleased or under a
// lease another owner let lapse, are claimed too, first, by the same
// rules: they stay cancelled, and no attempt is counted; the claimer runs
// the Abandon and then SettleJobAbandon.
//
// A claim clears a request to run again (rerun_at, see EnqueueJob): one
// made while an earlier runner held the lapsed lease is met by the
// attempt the claim begins, which reads the state after it.
//
// On PostgreSQL the rows are picked FOR UPDATE SKIP LOCKED (see
// postgresDialect.claimJobs), so concurrent claimers never take one job
// twice.
func (db *DB) ClaimJobsIn(ctx context.Context, kind string, lanes []string, owner string, now, leaseUntil time.Time, limit int) ([]Job, error) {
	return db.claimJobsIn(ctx, kind, lanes, owner, owner, now, leaseUntil, limit)
}

// ClaimJobsIdle is ClaimJobsIn for a runner that has no job of kind in
// flight: it also takes the jobs whose lease owner itself let lapse,
// which nothing of owner's works on — a claim or a leased insert
// (EnqueueJobLeased) committed whose answer never reached it. Their
// attempt is counted again, as a dead runner's is.
func (db *DB) ClaimJobsIdle(ctx context.Context, kind string, lanes []string, owner string, now, leaseUntil time.Time, limit int) ([]Job, error) {
	return db.claimJobsIn(ctx, kind, lanes, owner, "", now, leaseUntil, limit)
}

// claimJobsIn claims for owner, leaving alone the lapsed leases of skip
// ("" for none: no job is leased to no one).
func (db *DB) claimJobsIn(ctx context.Context, kind string, lanes []string, owner, skip string, now, leaseUntil time.Time, limit int) ([]Job, error) {
	marks, laneArgs := laneList(lanes)
	args := append([]any{owner, leaseUntil.UnixMilli(), now.UnixMilli(), kind}, laneArgs...)
	args = append(args, now.UnixMilli(), now.UnixMilli(), skip, kind)
	args = append(args, laneArgs...)
	args = append(args, now.UnixMilli(), skip, limit)
	var out []Job
	err := db.wr.queryEach(ctx, db.q(db.dialect.claimJobs(jobCols, marks)), args,
		func() { out = nil },
		func(r rowScanner) error {
			j, err := scanJob(r)
			out = append(out, j)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: claiming %s jobs: %w", kind, err)
	}
	return out, nil
}

func collectJobs(rows *sql.Rows) ([]Job, error) {
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("store: reading job: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: reading jobs: %w", err)
	}
	return out, nil
}

// laneList is the placeholders and arguments of the lanes a claim may
// take jobs from: the default lane and lanes.
func laneList(lanes []string) (string, []any) {
	args := []any{""}
	for _, l := range lanes {
		if l != "" {
			args = append(args, l)
		}
	}
	return strings.TrimSuffix(strings.Repeat("?,", len(args)), ","), args
}

// AnyJobDue reports whether ClaimJobsIn would find a job of kind in
// lanes for owner now (ClaimJobsIdle: for owner ""). It is a read, so a
// runner can poll without writing.
func (db *DB) AnyJobDue(ctx context.Context, kind string, lanes []string, owner string, now time.Time) (bool, error) {
	marks, laneArgs := laneList(lanes)
	args := append([]any{kind}, laneArgs...)
	args = append(args, now.UnixMilli(), now.UnixMilli(), owner, kind)
	args = append(args, laneArgs...)
	args = append(args, now.UnixMilli(), owner)
	var n int
	err := db.r.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM (SELECT 1 FROM jobs
		WHERE kind = ? AND status IN ('ready','running') AND lane IN (`+marks+`) AND ((status = 'ready' AND run_at <= ?) OR (status = 'running' AND lease_until <= ? AND lease_owner <> ?))
		UNION ALL
		SELECT 1 FROM jobs
		WHERE `+abandonOwedWhere(marks)+`
		LIMIT 1) AS due`), args...).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: looking for due %s jobs: %w", kind, err)
	}
	return n > 0, nil
}

// ExtendJobLeases pushes out the leases of every running job of kind held
// by owner, and of every cancelled one whose Abandon it claimed; a runner
// calls it while handlers are still working. It returns the ids of the
// jobs it extended: a job the runner works on that is not among them is
// no longer its own (another runner took it over after the lease lapsed,
// or it settled).
//
// One statement guarded on the lease owner and status.
func (db *DB) ExtendJobLeases(ctx context.Context, kind, owner string, leaseUntil, now time.Time) ([]int64, error) {
	var ids []int64
	err := db.wr.queryEach(ctx, db.q(`UPDATE jobs SET lease_until = ?, updated_at = ?
		WHERE (kind = ? AND lease_owner = ? AND status = 'running')
		   OR (abandon_owed = 1 AND kind = ? AND lease_owner = ?)
		RETURNING id`), []any{leaseUntil.UnixMilli(), now.UnixMilli(), kind, owner, kind, owner},
		func() { ids = ids[:0] },
		func(r rowScanner) error {
			var id int64
			err := r.Scan(&id)
			ids = append(ids, id)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: extending %s leases: %w", kind, err)
	}
	return ids, nil
}

// settle runs a guarded write on a job the caller holds the lease of and
// returns the job's new status. ErrLeaseLost when the lease is gone. It is
// one statement, whose guard PostgreSQL re-checks on the job's newest row
// (READ COMMITTED): a lease another runner took over meanwhile fails it.
//
// Settling is a lazy write (see engine): should a power loss forget
// it, the job is back to running under a lease that lapses, and runs again
// — which at-least-once delivery already asks every handler to bear.
func (db *DB) settle(ctx context.Context, what string, id int64, owner, set string, args ...any) (JobStatus, error) {
	return db.settleWhere(ctx, what, id, owner, heldRunning, set, args...)
}

// The guards of settleWhere: a job running under the caller's lease; a
// cancelled one whose Abandon the caller claimed; either.
const (
	heldRunning  = `status = 'running'`
	heldAbandon  = `status = 'cancelled' AND abandon_owed = 1`
	heldEither   = `(status = 'running' OR (status = 'cancelled' AND abandon_owed = 1))`
	notCancelled = ` AND cancel_requested = 0`
)

// settleUnlessCancelled is settle for a write that would have the job run
// again (a retry, a reschedule): a job an operator cancelled while its
// attempt ran is left as it is — running, under the caller's lease — and
// reported as JobRunning, for the caller to retire once the handler's
// Abandon has succeeded. A write that retired it here would leave a stop
// or a crash before that Abandon nothing to reclaim: the Abandon lost.
// (A running job's cancel request is never withdrawn, so the read that
// tells a cancel from a lost lease cannot mistake one for the other.)
func (db *DB) settleUnlessCancelled(ctx context.Context, what string, id int64, owner, set string, args ...any) (JobStatus, error) {
	st, err := db.settleWhere(ctx, what, id, owner, heldRunning+notCancelled, set, args...)
	if !errors.Is(err, ErrLeaseLost) {
		return st, err
	}
	var (
		status     JobStatus
		leaseOwner sql.NullString
		cancelled  int64
	)
	err = db.r.QueryRowContext(ctx, db.q(`SELECT status, lease_owner, cancel_requested FROM jobs WHERE id = ?`), id).
		Scan(&status, &leaseOwner, &cancelled)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("%w: job %d (%s)", ErrLeaseLost, id, what)
	case err != nil:
		return "", fmt.Errorf("store: job %d (%s): %w", id, what, err)
	case status == JobRunning && leaseOwner.String == owner && cancelled == 1:
		return JobRunning, nil
	}
	return "", fmt.Errorf("%w: job %d (%s)", ErrLeaseLost, id, what)
}

func (db *DB) settleWhere(ctx context.Context, what string, id int64, owner, held, set string, args ...any) (JobStatus, error) {
	stmt := db.q(`UPDATE jobs SET ` + set + `
		WHERE id = ? AND lease_owner = ? AND ` + held + `
		RETURNING status`)
	var st JobStatus
	err := db.lazyWr.QueryRowContext(ctx, stmt, append(args, id, owner)...).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%w: job %d (%s)", ErrLeaseLost, id, what)
	}
	if err != nil {
		return "", fmt.Errorf("store: job %d (%s): %w", id, what, err)
	}
	return st, nil
}

// CompleteJob settles a job as done, and returns JobDone — or JobReady
// when an enqueue asked it to run again while the attempt ran (see
// EnqueueJob): then it is ready at the time asked for, with a fresh
// attempt budget, unless an operator cancelled it meanwhile.
func (db *DB) CompleteJob(ctx context.Context, id int64, owner string, now time.Time) (JobStatus, error) {
	return db.settle(ctx, "done", id, owner,
		`status = CASE WHEN `+noRerun+` THEN 'done' ELSE 'ready' END,
		 run_at = CASE WHEN `+noRerun+` THEN run_at ELSE rerun_at END,
		 attempts = CASE WHEN `+noRerun+` THEN attempts ELSE 0 END,
		 finished_at = CASE WHEN `+noRerun+` THEN ? ELSE CAST(NULL AS BIGINT) END,
		 rerun_at = NULL, lease_owner = NULL, lease_until = NULL, last_error = '', updated_at = ?`,
		now.UnixMilli(), now.UnixMilli())
}

// noRerun is the condition of a job settling done that is not to run
// again (see CompleteJob).
const noRerun = `(rerun_at IS NULL OR cancel_requested = 1)`

// RescheduleJob makes a periodic job ready again at runAt with a fresh
// attempt budget. A job an operator cancelled meanwhile is left running
// under the lease and JobRunning returned: the caller retires it, after
// its Abandon (see settleUnlessCancelled).
func (db *DB) RescheduleJob(ctx context.Context, id int64, owner string, runAt, now time.Time) (JobStatus, error) {
	return db.settleUnlessCancelled(ctx, "reschedule", id, owner,
		`status = 'ready', finished_at = NULL, rerun_at = NULL,
		 attempts = 0, run_at = ?, last_error = '', lease_owner = NULL, lease_until = NULL, updated_at = ?`,
		runAt.UnixMilli(), now.UnixMilli())
}

// RetryJob makes a job ready again at runAt, recording reason. refund gives
// back the attempt the run counted (a rate limit is not the job's failure).
// A job an operator cancelled meanwhile is left running under the lease
// and JobRunning returned: the caller retires it, after its Abandon (see
// settleUnlessCancelled).
func (db *DB) RetryJob(ctx context.Context, id int64, owner string, runAt time.Time, reason string, refund bool, now time.Time) (JobStatus, error) {
	refunded := 0
	if refund {
		refunded = 1
	}
	return db.settleUnlessCancelled(ctx, "retry", id, owner,
		`status = 'ready', finished_at = NULL, rerun_at = NULL,
		 attempts = attempts - ?, run_at = ?, last_error = ?, lease_owner = NULL, lease_until = NULL, updated_at = ?`,
		refunded, runAt.UnixMilli(), failureText(reason), now.UnixMilli())
}

// RetireJob settles a job as failed or cancelled for good.
func (db *DB) RetireJob(ctx context.Context, id int64, owner string, status JobStatus, reason string, now time.Time) error {
	if status != JobFailed && status != JobCancelled {
		return fmt.Errorf("store: cannot retire job %d as %q", id, status)
	}
	_, err := db.settle(ctx, "retire", id, owner,
		`status = ?, last_error = ?, rerun_at = NULL, lease_owner = NULL, lease_until = NULL, updated_at = ?, finished_at = ?`,
		string(status), failureText(reason), now.UnixMilli(), now.UnixMilli())
	return err
}

// ReleaseJob hands a leased job back as ready now, refunding the attempt:
// the runner is stopping and could not let the handler finish, or has no
// slot for it. A cancelled job whose Abandon the runner claimed is handed
// back still cancelled, its Abandon still owed, for any runner to claim.
func (db *DB) ReleaseJob(ctx context.Context, id int64, owner string, now time.Time) error {
	_, err := db.settleWhere(ctx, "release", id, owner, heldEither,
		`attempts = CASE WHEN status = 'running' THEN attempts - 1 ELSE attempts END,
		 run_at = CASE WHEN status = 'running' THEN ? ELSE run_at END,
		 status = CASE WHEN status = 'running' THEN 'ready' ELSE status END,
		 rerun_at = NULL, lease_owner = NULL, lease_until = NULL, updated_at = ?`,
		now.UnixMilli(), now.UnixMilli())
	return err
}

// SettleJobAbandon records that the Abandon owed by a cancelled job (see
// Job.AbandonOwed), which owner claimed, has been run: the debt is
// cleared and the lease let go. ErrLeaseLost when owner no longer holds
// it (its lease lapsed and another runner took it, or an operator
// revived the job).
func (db *DB) SettleJobAbandon(ctx context.Context, id int64, owner string, now time.Time) error {
	_, err := db.settleWhere(ctx, "abandoned", id, owner, heldAbandon,
		`abandon_owed = 0, lease_owner = NULL, lease_until = NULL, updated_at = ?`, now.UnixMilli())
	return err
}

// abandonOwedWhere is the condition of the jobs whose owed Abandon a
// claim takes (see ClaimJobsIn), in the lanes whose placeholders marks
// lists. Its arguments: kind, each lane, now, owner. The partial index
// jobs_abandon_owed finds them. (Only a cancelled job owes one: a
// condition on the status too would have SQLite read every cancelled
// job of the kind through jobs_due instead.)
func abandonOwedWhere(marks string) string {
	return `abandon_owed = 1 AND kind = ? AND lane IN (` + marks + `)
		AND (lease_owner IS NULL OR (lease_until <= ? AND lease_owner <> ?))`
}

// announce tells the runners of other instances, when tx commits, that a
// job of kind is there to claim (PostgreSQL's NOTIFY; nothing on SQLite,
// whose runners poll).
func (db *DB) announce(ctx context.Context, tx *sql.Tx, kind string) error {
	stmt := db.dialect.announceJob()
	if stmt == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, db.q(stmt), kind)
	return err
}

// CancelJob cancels a job for an operator. A ready job is settled as
// cancelled at once (returned with Status cancelled), owing its handler's
// Abandon (AbandonOwed), which a runner of its kind claims like a due job
// — on PostgreSQL, the runners of other instances are told at once, as of
// an enqueued job; a running one is marked so that its current attempt is
// its last. A settled job is ErrWrongState. The change is one guarded
// statement (its CASEs, too, are evaluated on the job's newest row); the
// read that explains a refusal only names the status the job was found
// in.
func (db *DB) CancelJob(ctx context.Context, id int64, now time.Time) (Job, error) {
	return db.CancelJobAudited(ctx, id, now, nil)
}

// CancelJobAudited is CancelJob with the audit row audit makes of the job
// as the cancel left it, written in the same transaction: an operator's
// cancel and the row saying who cancelled are stored together or not at
// all. A nil audit writes no row.
func (db *DB) CancelJobAudited(ctx context.Context, id int64, now time.Time, audit func(Job) AuditEvent) (Job, error) {
	var job Job
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRowContext(ctx, db.q(`UPDATE jobs
			SET status = CASE WHEN status = 'ready' THEN 'cancelled' ELSE status END,
			    finished_at = CASE WHEN status = 'ready' THEN ? ELSE finished_at END,
			    abandon_owed = CASE WHEN status = 'ready' THEN 1 ELSE abandon_owed END,
			    cancel_requested = 1, updated_at = ?
			WHERE id = ? AND status IN ('ready','running')
			RETURNING `+jobCols), now.UnixMilli(), now.UnixMilli(), id))
		if errors.Is(err, sql.ErrNoRows) {
			return db.explainMissing(ctx, tx, id, "cancel", now)
		}
		if err != nil {
			return err
		}
		if job.AbandonOwed {
			if err := db.announce(ctx, tx, job.Kind); err != nil {
				return fmt.Errorf("store: cancel job %d: announcing its abandon: %w", id, err)
			}
		}
		return db.insertJobAudit(ctx, tx, job, audit)
	})
	return job, err
}

// insertJobAudit writes, inside tx, the audit row audit makes of job as
// an operator's change left it; none when audit is nil.
func (db *DB) insertJobAudit(ctx context.Context, tx *sql.Tx, job Job, audit func(Job) AuditEvent) error {
	if audit == nil {
		return nil
	}
	ev := audit(job)
	if err := db.insertAudit(ctx, tx, ev); err != nil {
		return fmt.Errorf("store: job %d: writing audit event %s: %w", job.ID, ev.Event, err)
	}
	return nil
}

// RetryJobNow makes a job ready to run now for an operator: a waiting job
// skips its backoff, a failed or cancelled one is revived with a fresh
// attempt budget (and counted in Revivals). A cancelled job's Abandon
// still owed and not yet claimed is dropped: the work is to happen after
// all. ErrConflict if another live job has its kind and key (the partial
// unique index refuses it, a concurrent enqueue included); ErrWrongState
// if it is running or done, its deadline has passed (its next claim would
// retire it unrun), or a runner is running its owed Abandon now (under a
// lease not lapsed). Guarded as CancelJob is; on PostgreSQL the runners
// of other instances are told at once, as of an enqueued job, so that the
// operator's "now" does not wait for their poll.
func (db *DB) RetryJobNow(ctx context.Context, id int64, now time.Time) (Job, error) {
	return db.RetryJobNowAudited(ctx, id, now, nil)
}

// RetryJobNowAudited is RetryJobNow with the audit row audit makes of the
// job as the retry left it, written in the same transaction (see
// CancelJobAudited). A nil audit writes no row.
func (db *DB) RetryJobNowAudited(ctx context.Context, id int64, now time.Time, audit func(Job) AuditEvent) (Job, error) {
	var job Job
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRowContext(ctx, db.q(`UPDATE jobs
			SET attempts = CASE WHEN status = 'ready' THEN attempts ELSE 0 END,
			    revivals = CASE WHEN status = 'ready' THEN revivals ELSE revivals + 1 END,
			    status = 'ready', run_at = ?, cancel_requested = 0, finished_at = NULL, updated_at = ?,
			    abandon_owed = 0, lease_owner = NULL, lease_until = NULL
			WHERE id = ? AND status IN ('ready','failed','cancelled') AND (deadline IS NULL OR deadline > ?)
			  AND NOT (abandon_owed = 1 AND lease_until IS NOT NULL AND lease_until > ?)
			RETURNING `+jobCols), now.UnixMilli(), now.UnixMilli(), id, now.UnixMilli(), now.UnixMilli()))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return db.explainMissing(ctx, tx, id, "retry", now)
		case err != nil && db.dialect.uniqueViolation(err):
			return fmt.Errorf("%w: job %d: another job with its kind and key is live", ErrConflict, id)
		case err != nil:
			return err
		}
		if err := db.announce(ctx, tx, job.Kind); err != nil {
			return fmt.Errorf("store: retry job %d: announcing it: %w", id, err)
		}
		return db.insertJobAudit(ctx, tx, job, audit)
	})
	return job, err
}

// explainMissing turns "no row updated" into ErrNotFound or ErrWrongState.
func (db *DB) explainMissing(ctx context.Context, tx *sql.Tx, id int64, op string, now time.Time) error {
	var (
		st                   JobStatus
		deadline, leaseUntil sql.NullInt64
		owed                 int
	)
	err := tx.QueryRowContext(ctx, db.q(`SELECT status, deadline, abandon_owed, lease_until FROM jobs WHERE id = ?`), id).
		Scan(&st, &deadline, &owed, &leaseUntil)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: job %d", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("store: job %d: %w", id, err)
	}
	if op == "retry" && st != JobRunning && st != JobDone && deadline.Valid && deadline.Int64 <= now.UnixMilli() {
		return fmt.Errorf("%w: cannot %s job %d: its deadline passed at %s", ErrWrongState, op, id, nullMs(deadline).Format(time.RFC3339))
	}
	if op == "retry" && st == JobCancelled && owed == 1 && leaseUntil.Valid && leaseUntil.Int64 > now.UnixMilli() {
		return fmt.Errorf("%w: cannot %s job %d: a runner is giving it up now; retry once it has", ErrWrongState, op, id)
	}
	return fmt.Errorf("%w: cannot %s job %d: it is %s", ErrWrongState, op, id, st)
}

// GetJob reads one job.
func (db *DB) GetJob(ctx context.Context, id int64) (Job, error) {
	j, err := scanJob(db.r.QueryRowContext(ctx, db.q(`SELECT `+jobCols+` FROM jobs WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("%w: job %d", ErrNotFound, id)
	}
	if err != nil {
		return Job{}, fmt.Errorf("store: job %d: %w", id, err)
	}
	return j, nil
}

// JobFilter selects jobs for operators. Zero fields do not filter.
type JobFilter struct {
	Kind   string
	Status JobStatus
	Key    string
	// AbandonOwed: only the cancelled jobs whose Abandon is still owed
	// (Job.AbandonOwed).
	AbandonOwed bool
	BeforeID    int64 // page: only jobs with a smaller id
	Limit       int   // default 100
}

// ListJobs returns jobs newest first.
func (db *DB) ListJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	if !allHoldable(f.Kind, string(f.Status), f.Key) {
		return nil, nil
	}
	var (
		where []string
		args  []any
	)
	if f.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, f.Kind)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	if f.Key != "" {
		where, args = append(where, "key = ?"), append(args, f.Key)
	}
	if f.AbandonOwed {
		where = append(where, "abandon_owed = 1")
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	stmt := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		stmt += ` WHERE ` + strings.Join(where, " AND ")
	}
	stmt += ` ORDER BY id DESC LIMIT ?`
	rows, err := db.r.QueryContext(ctx, db.q(stmt), append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: listing jobs: %w", err)
	}
	return collectJobs(rows)
}

// JobCount is the number of jobs of one kind in one status.
type JobCount struct {
	Kind   string
	Status JobStatus
	N      int64
}

// CountJobs counts jobs by kind and status.
func (db *DB) CountJobs(ctx context.Context) ([]JobCount, error) {
	return db.countJobs(ctx, "counting jobs", `SELECT kind, status, COUNT(*) FROM jobs GROUP BY kind, status ORDER BY kind, status`)
}

// CountOwedAbandons counts, by kind, the cancelled jobs whose Abandon is
// still owed (Job.AbandonOwed): an operator cancelled them while they
// waited and no runner of their kind has given them up yet. The partial
// index jobs_abandon_owed holds exactly these rows, so this reads no other.
func (db *DB) CountOwedAbandons(ctx context.Context) ([]JobCount, error) {
	return db.countJobs(ctx, "counting owed abandons",
		`SELECT kind, 'cancelled', COUNT(*) FROM jobs WHERE abandon_owed = 1 GROUP BY kind ORDER BY kind`)
}

// countJobs runs a count of jobs whose rows are kind, status, count.
func (db *DB) countJobs(ctx context.Context, what, query string) ([]JobCount, error) {
	rows, err := db.r.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	defer rows.Close()
	var out []JobCount
	for rows.Next() {
		var c JobCount
		if err := rows.Scan(&c.Kind, &c.Status, &c.N); err != nil {
			return nil, fmt.Errorf("store: %s: %w", what, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// NextJobDue returns the earliest time a job of one of kinds in lanes
// (and the default lane) becomes claimable (a ready job's run_at, a
// running job's lease expiry, a cancelled job's owed Abandon: now, or
// its lease's expiry), and false when there is none.
func (db *DB) NextJobDue(ctx context.Context, kinds, lanes []string) (time.Time, bool, error) {
	if len(kinds) == 0 {
		return time.Time{}, false, nil
	}
	marks := strings.TrimSuffix(strings.Repeat("?,", len(kinds)), ",")
	args := make([]any, len(kinds))
	for i, k := range kinds {
		args[i] = k
	}
	laneMarks, laneArgs := laneList(lanes)
	args = append(args, laneArgs...)
	args = append(args, args...)
	var next sql.NullInt64
	err := db.r.QueryRowContext(ctx, db.q(`SELECT MIN(at) FROM (
		SELECT CASE WHEN status = 'ready' THEN run_at ELSE lease_until END AS at
		FROM jobs WHERE status IN ('ready','running') AND kind IN (`+marks+`) AND lane IN (`+laneMarks+`)
		UNION ALL
		SELECT COALESCE(lease_until, 0)
		FROM jobs WHERE abandon_owed = 1 AND kind IN (`+marks+`) AND lane IN (`+laneMarks+`)) AS due`), args...).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: next due job: %w", err)
	}
	return nullMs(next), next.Valid, nil
}

// MoveJobLane puts the live job of kind and key in lane; a job a runner
// holds now finishes its attempt where it runs. It reports whether a job
// was moved.
//
// One guarded statement.
func (db *DB) MoveJobLane(ctx context.Context, kind, key, lane string, now time.Time) (bool, error) {
	res, err := db.wr.ExecContext(ctx, db.q(`UPDATE jobs SET lane = ?, updated_at = ?
		WHERE kind = ? AND key = ? AND status IN ('ready','running') AND lane <> ?`), lane, now.UnixMilli(), kind, key, lane)
	if err != nil {
		return false, fmt.Errorf("store: moving %s job %q to lane %q: %w", kind, key, lane, err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// PruneJobs deletes settled jobs that finished before cutoff, in
// batches of sweepBatch, each its own write (see deleteInBatches), and
// returns how many it deleted.
//
// Each batch is one statement deleting settled rows, oldest first,
// found by the index on finished_at. A cancelled job whose Abandon is
// still owed is kept until it has run. The one change a settled row may
// see is an operator's revival (RetryJobNow clears finished_at): the
// DELETE checks that again on the row it deletes, which PostgreSQL (READ
// COMMITTED) evaluates on the newest version of a row a revival changed
// after the batch was picked, where the pick alone was its old one.
func (db *DB) PruneJobs(ctx context.Context, cutoff time.Time) (int64, error) {
	n, err := db.deleteInBatches(ctx, `DELETE FROM jobs WHERE finished_at IS NOT NULL AND id IN
		(SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ? AND status IN ('done','failed','cancelled') AND abandon_owed = 0
		ORDER BY finished_at LIMIT ?)`, cutoff.UnixMilli())
	if err != nil {
		return n, fmt.Errorf("store: pruning jobs: %w", err)
	}
	return n, nil
}
