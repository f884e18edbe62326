package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/internal/logevery"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// RunnerOptions tunes a Runner. The zero value is a safe default.
type RunnerOptions struct {
	Clock  clock.Clock // default: wall clock
	Logger *zap.Logger // default: no logging
	// Owner names this runner in leases; default host:pid:random.
	Owner string
	// Lease is the default lease of an attempt (Leaser overrides). 1m.
	Lease time.Duration
	// Concurrency is the default per-kind cap (Limiter overrides). 8.
	Concurrency int
	// PollInterval bounds how long a job queued by another process waits
	// before this runner notices it. 1s.
	PollInterval time.Duration
	// BackoffBase and BackoffCap shape Retry delays: base·2^(attempt−1),
	// capped. 30s and 1h.
	BackoffBase, BackoffCap time.Duration
	// Jitter spreads each backoff by up to ±Jitter of itself (0.1 by
	// default, at most 0.5; negative means none), so retries of many jobs
	// that failed together do not return together.
	Jitter float64
	// StopTimeout is how long Stop waits for running handlers before it
	// cancels them and releases their leases. 10s.
	StopTimeout time.Duration
	// AbandonRetry is how long, on Clock, a handler's Abandon that keeps
	// failing is tried again before the job is retired without it (the
	// failure logged): long enough for a database outage, bounded so that
	// an Abandon that can never succeed does not hold a slot of its kind
	// for ever. 1h.
	AbandonRetry time.Duration
	// Lanes are the lanes this runner serves besides the default one: it
	// claims a job only when the job's lane (Spec.Lane) is "" or one of
	// these. A job of a lane no runner serves waits, unclaimed, until one
	// does (or its deadline passes, for the runner that then serves it).
	Lanes []string
	// ClockCheckEvery is how often (on the wall clock) the runner
	// compares its Clock with the database server's, after a first
	// comparison at Start; only where the database has a server of its
	// own (PostgreSQL), which several instances share. 1m.
	ClockCheckEvery time.Duration
	// ClockSkewWarn is the skew from the server's clock (less half the
	// round trip of the comparison, its uncertainty) beyond which the
	// runner logs clock_skew: first at once, then at most every
	// clockSkewLogEvery while it lasts. Leases are written in the clock of
	// the instance holding them and read in the clock of the one looking
	// for work: two instances 40s apart (a minute's lease renewed every
	// 20s) take each other's running jobs. 10s.
	ClockSkewWarn time.Duration
	// OnClockReading, when set, is told of each comparison (a gauge).
	OnClockReading func(store.ClockReading)
}

func (o *RunnerOptions) setDefaults() {
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Owner == "" {
		o.Owner = defaultOwner()
	}
	if o.Lease <= 0 {
		o.Lease = time.Minute
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 30 * time.Second
	}
	if o.BackoffCap <= 0 {
		o.BackoffCap = time.Hour
	}
	if o.BackoffCap < o.BackoffBase {
		o.BackoffCap = o.BackoffBase
	}
	switch {
	case o.Jitter == 0:
		o.Jitter = 0.1
	case o.Jitter < 0:
		o.Jitter = 0
	case o.Jitter > 0.5:
		o.Jitter = 0.5
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.AbandonRetry <= 0 {
		o.AbandonRetry = time.Hour
	}
	if o.ClockCheckEvery <= 0 {
		o.ClockCheckEvery = time.Minute
	}
	if o.ClockSkewWarn <= 0 {
		o.ClockSkewWarn = 10 * time.Second
	}
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// kindState is a registered handler with its limits and bookkeeping.
type kindState struct {
	Handler
	lease       time.Duration
	concurrency int
	running     int // guarded by Runner.mu
	// starting counts RunNow's jobs between reserve and startNow: stored
	// (or being stored) leased to the runner, not yet in flight. Guarded
	// by Runner.mu.
	starting  int
	backlog   bool      // jobs may wait for a slot of this kind; guarded by Runner.mu
	renewedAt time.Time // loop goroutine only
}

// flight is one attempt in progress. Once a worker starts settling it, Stop
// leaves it alone; once Stop has released it, the worker records nothing —
// so a job is never both released and retired, and Abandon runs once.
type flight struct {
	ks       *kindState
	settling bool
	released bool
	// lost: a renewal found the job no longer leased to this runner;
	// cancel stops its handler (nil until the handler runs).
	lost   bool
	cancel context.CancelFunc
}

// Runner claims due jobs of the kinds it has handlers for and runs them.
// Several runners (in one process during a config reload, or in several
// processes) may share one store: claims are atomic and every settling write
// is guarded on the lease owner.
type Runner struct {
	q        *Queue
	opts     RunnerOptions
	log      *zap.Logger
	handlers map[string]*kindState
	kinds    []string // sorted, for stable claim order

	wake chan struct{}
	// claimFailures spaces the log lines of failed claims: while the
	// database is away every poll of every kind fails.
	claimFailures logevery.Limiter
	// renewFailures spaces the log lines of failed lease renewals: while
	// the database is away an overdue renewal is tried at every turn of
	// the loop, ten a second.
	renewFailures logevery.Limiter
	// watchDone is closed when the watcher of other instances' jobs
	// (store.WatchJobs) has returned.
	watchDone chan struct{}
	// clockSkews spaces the log lines of a clock skewed from the
	// database server's; clockDone is closed when the loop comparing
	// them has returned.
	clockSkews logevery.Limiter
	clockDone  chan struct{}

	mu       sync.Mutex
	inflight map[int64]*flight
	// hinted are the kinds a Wake named since the loop last claimed; with
	// hintAll the loop claims every kind. An enqueue names its kind, so a
	// woken loop claims only where work was added instead of issuing an
	// empty claim (a write) for every kind.
	hinted   map[string]bool
	hintAll  bool
	stopping bool
	started  bool

	loopCancel context.CancelFunc
	loopDone   chan struct{}
	workCtx    context.Context
	workCancel context.CancelFunc
	workers    sync.WaitGroup
}

// claimFailureLogEvery is the least time between two log lines of failed
// claims; each says how many failed since the last.
const claimFailureLogEvery = time.Minute

// NewRunner checks the handlers and returns a runner that is not started.
func NewRunner(q *Queue, handlers []Handler, opts RunnerOptions) (*Runner, error) {
	opts.setDefaults()
	r := &Runner{
		q: q, opts: opts, log: opts.Logger.Named("jobs"),
		handlers: make(map[string]*kindState, len(handlers)),
		wake:     make(chan struct{}, 1),
		inflight: make(map[int64]*flight),
		hinted:   map[string]bool{},

		claimFailures: logevery.Limiter{Every: claimFailureLogEvery},
		renewFailures: logevery.Limiter{Every: claimFailureLogEvery},
		clockSkews:    logevery.Limiter{Every: clockSkewLogEvery},
	}
	for _, h := range handlers {
		kind := h.Kind()
		if kind == "" {
			return nil, errors.New("jobs: a handler has an empty kind")
		}
		if _, dup := r.handlers[kind]; dup {
			return nil, fmt.Errorf("jobs: two handlers for kind %q", kind)
		}
		ks := &kindState{Handler: h, lease: opts.Lease, concurrency: opts.Concurrency}
		if l, ok := h.(Leaser); ok && l.Lease() > 0 {
			ks.lease = l.Lease()
		}
		if l, ok := h.(Limiter); ok && l.Concurrency() > 0 {
			ks.concurrency = l.Concurrency()
		}
		r.handlers[kind] = ks
		r.kinds = append(r.kinds, kind)
	}
	sort.Strings(r.kinds)
	return r, nil
}

// serves reports whether the runner claims jobs of lane.
func (r *Runner) serves(lane string) bool {
	return lane == "" || slices.Contains(r.opts.Lanes, lane)
}

// Kinds lists the kinds of job the runner handles, sorted.
func (r *Runner) Kinds() []string { return slices.Clone(r.kinds) }

// Owner is the name this runner puts on its leases.
func (r *Runner) Owner() string { return r.opts.Owner }

// Start runs every handler's Recover, attaches the runner to its queue and
// starts claiming. A Recover error stops the start.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("jobs: runner already started")
	}
	r.started = true
	r.mu.Unlock()
	for _, kind := range r.kinds {
		if err := recoverSafely(ctx, r.handlers[kind], r.q); err != nil {
			return fmt.Errorf("jobs: recovering %s: %w", kind, err)
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	r.loopCancel, r.loopDone = cancel, make(chan struct{})
	r.clockDone = make(chan struct{})
	if r.checkClock(ctx) {
		go r.watchClock(loopCtx)
	} else {
		close(r.clockDone) // nothing to compare with
	}
	r.workCtx, r.workCancel = context.WithCancel(context.Background())
	r.q.attach(r)
	// Jobs other instances enqueue wake this runner too, where the
	// database can tell (PostgreSQL); polling stays the fallback.
	r.watchDone = make(chan struct{})
	go func() {
		defer close(r.watchDone)
		r.q.db.WatchJobs(loopCtx, r.wakeKind)
	}()
	go r.loop(loopCtx)
	return nil
}

// recoverSafely runs a handler's Recover, turning a panic into an error:
// Start's caller (Caddy starting a config) then refuses the config and
// says why, where a panic would end the process at every start.
func recoverSafely(ctx context.Context, h Handler, q *Queue) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return h.Recover(ctx, q)
}

// Wake makes the runner look for due jobs of every kind now.
func (r *Runner) Wake() { r.wakeKind("") }

// wakeKind makes the runner look for due jobs of one kind ("" for all).
func (r *Runner) wakeKind(kind string) {
	r.mu.Lock()
	if kind == "" {
		r.hintAll = true
	} else {
		r.hinted[kind] = true
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// takeHints returns the kinds to claim after a wake-up and clears them.
func (r *Runner) takeHints() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hintAll {
		r.hintAll = false
		clear(r.hinted)
		return slices.Clone(r.kinds)
	}
	var kinds []string
	for _, k := range r.kinds {
		if r.hinted[k] {
			kinds = append(kinds, k)
		}
	}
	clear(r.hinted)
	return kinds
}

// Running is the number of attempts this runner has in flight.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// Stop stops claiming, waits up to StopTimeout for running handlers, then
// cancels the rest and, once they have returned (or after a further short
// grace for handlers that ignore cancellation), releases their leases so
// another runner can take them at once.
func (r *Runner) Stop() error {
	r.mu.Lock()
	if !r.started || r.loopCancel == nil {
		r.mu.Unlock()
		return nil
	}
	r.stopping = true
	r.mu.Unlock()
	r.loopCancel()
	<-r.loopDone
	<-r.watchDone
	<-r.clockDone
	r.q.detach(r)

	if waitTimeout(&r.workers, r.opts.StopTimeout) {
		return nil
	}
	r.mu.Lock()
	ids := make([]int64, 0, len(r.inflight))
	for id, f := range r.inflight {
		if !f.settling {
			f.released = true
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	// Cancel the handlers before handing their jobs back, and give them
	// a moment to return: a job released while its handler still works
	// is claimable by another runner, which would run it beside this one.
	r.workCancel()
	if !waitTimeout(&r.workers, time.Second) {
		r.log.Warn("job handlers still running after stop; releasing their jobs all the same",
			zap.String("event", "jobs_stop_abandoned"), zap.Int("handlers", len(ids)))
	}
	var errs []error
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.q.db.ReleaseJob(ctx, id, r.opts.Owner, r.opts.Clock.Now())
		cancel()
		if err != nil && !errors.Is(err, store.ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// clockSkewLogEvery is the least time between two log lines of a
// skewed clock.
const clockSkewLogEvery = 10 * time.Minute

// clockCheckTimeout bounds one comparison of the clocks.
const clockCheckTimeout = 5 * time.Second

// watchClock compares the clocks every ClockCheckEvery until ctx ends.
// The interval is timed by the wall clock, not by Clock: what is compared
// is Clock with a real server's clock, and a fake Clock's timers are the
// loop's, which tests step through one at a time.
func (r *Runner) watchClock(ctx context.Context) {
	defer close(r.clockDone)
	t := time.NewTicker(r.opts.ClockCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.checkClock(ctx)
	}
}

// checkClock compares the runner's clock with the database server's,
// tells OnClockReading, and logs a skew beyond ClockSkewWarn (and its
// end). It reports false when the database has no clock of its own to
// compare with. A comparison that fails is skipped: the store's own
// lines say why the database is away.
func (r *Runner) checkClock(ctx context.Context) (comparable bool) {
	ctx, cancel := context.WithTimeout(ctx, clockCheckTimeout)
	defer cancel()
	c, ok, err := r.q.db.ReadServerClock(ctx, r.opts.Clock.Now)
	if err != nil {
		r.log.Debug("comparing the clock with the database's", zap.Error(err))
		return true
	}
	if !ok {
		return false
	}
	if r.opts.OnClockReading != nil {
		r.opts.OnClockReading(c)
	}
	skew := c.Skew()
	if skew.Abs()-c.RoundTrip/2 > r.opts.ClockSkewWarn {
		if log, n := r.clockSkews.Note(c.Local); log {
			r.log.Warn("this instance's clock is not in step with the database server's: instances whose clocks differ by 40s take over each other's running jobs",
				zap.String("event", "clock_skew"), zap.String("database", r.q.db.String()),
				zap.Time("clock", c.Local), zap.Time("database_clock", c.Server), zap.Duration("skew", skew),
				zap.Duration("round_trip", c.RoundTrip), zap.Duration("threshold", r.opts.ClockSkewWarn), zap.Int("times", n))
		}
	} else if log, n := r.clockSkews.Recovered(); log {
		r.log.Info("this instance's clock is in step with the database server's again", zap.String("event", "clock_skew_recovered"),
			zap.Time("clock", c.Local), zap.Time("database_clock", c.Server), zap.Duration("skew", skew), zap.Int("times", n))
	}
	return true
}

// reserve takes one of ks's slots for a job RunNow is about to store
// leased to r, so that jobs run at once count against the kind's cap like
// claimed ones. It reports false when the runner is not running or every
// slot is taken; the kind is then marked as having a backlog, so the next
// slot to free wakes the loop to claim what waits.
func (r *Runner) reserve(ks *kindState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loopCancel == nil || r.stopping {
		return false
	}
	if ks.running >= ks.concurrency {
		ks.backlog = true
		return false
	}
	ks.running++
	ks.starting++
	return true
}

// unreserve gives back a slot reserve took for a job that was not stored.
func (r *Runner) unreserve(ks *kindState) {
	r.mu.Lock()
	ks.running--
	ks.starting--
	r.mu.Unlock()
}

// startNow runs a job this process stored already leased to r, in the
// slot reserve took for it, in a goroutine, as if the loop had claimed it.
// It returns a channel closed when the attempt has settled, or false if
// the runner began stopping meanwhile (the slot is given back).
func (r *Runner) startNow(ks *kindState, job Job) (<-chan bool, bool) {
	r.mu.Lock()
	ks.starting--
	if r.stopping {
		ks.running--
		r.mu.Unlock()
		return nil, false
	}
	r.inflight[job.ID] = &flight{ks: ks}
	r.workers.Add(1)
	r.mu.Unlock()
	done := make(chan bool, 1)
	go func() {
		done <- r.work(ks, &job)
	}()
	return done, true
}

// waitTimeout waits for wg up to d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// loop claims what is due, renews leases, and sleeps until the next due
// time, a wake-up, or the poll interval, whichever comes first.
func (r *Runner) loop(ctx context.Context) {
	defer close(r.loopDone)
	kinds, polled := r.kinds, true
	lastPoll := r.opts.Clock.Now()
	for {
		if ctx.Err() != nil {
			return
		}
		more := r.claimDue(ctx, kinds, polled)
		r.renewLeases(ctx)
		wait := r.nextWait(ctx, len(more) > 0)
		t := r.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.wake:
			t.Stop()
			// Wake-ups arriving faster than the timer could fire must not
			// starve the kinds nobody woke: poll them all at least once
			// per poll interval.
			if now := r.opts.Clock.Now(); now.Sub(lastPoll) >= r.opts.PollInterval {
				kinds, polled, lastPoll = r.kinds, true, now
				r.takeHints()
			} else {
				kinds, polled = append(r.takeHints(), more...), false
			}
		case <-t.C():
			kinds, polled, lastPoll = r.kinds, true, r.opts.Clock.Now()
		}
	}
}

// claimDue claims, for each of kinds with free slots, as many due jobs as
// it has slots, and starts a worker for each. It returns the kinds that
// filled all the slots they asked for (more may be waiting). After a poll
// it first asks a reader whether anything is due, so an idle runner polls
// with reads, not writes.
func (r *Runner) claimDue(ctx context.Context, kinds []string, polled bool) (more []string) {
	seen := map[string]bool{}
	for _, kind := range kinds {
		if seen[kind] {
			continue
		}
		seen[kind] = true
		ks := r.handlers[kind]
		r.mu.Lock()
		free := ks.concurrency - ks.running
		if free <= 0 {
			// Woken or polling with every slot taken: what woke it waits
			// for the next slot to free.
			ks.backlog = true
		}
		r.mu.Unlock()
		if free <= 0 {
			continue
		}
		claimed, wrote, err := r.claimInto(ctx, kind, ks, free, polled)
		if err != nil {
			if ctx.Err() == nil {
				if log, n := r.claimFailures.Note(r.opts.Clock.Now()); log {
					r.log.Error("claiming jobs", zap.String("event", "jobs_claim_failed"), zap.String("kind", kind),
						zap.Int("failures", n), zap.Duration("interval", claimFailureLogEvery), zap.Error(err))
				}
			}
			continue
		}
		// Only a claim that wrote says the claims work again: a poll that
		// read that nothing of this kind is due wrote nothing, and with a
		// database that reads but cannot take writes (a full disk) it
		// would otherwise end every interval that another kind's failed
		// claim just began.
		if wrote {
			if log, n := r.claimFailures.Recovered(); log {
				r.log.Info("claiming jobs again", zap.String("event", "jobs_claim_recovered"), zap.Int("failures", n))
			}
		}
		// RunNow may have taken slots while the claim was in the store;
		// what no longer fits under the cap goes back to the queue, and the
		// next slot to free wakes the loop to claim it again.
		r.mu.Lock()
		room := max(ks.concurrency-ks.running, 0)
		var excess []Job
		if len(claimed) > room {
			claimed, excess = claimed[:room], claimed[room:]
		}
		ks.running += len(claimed)
		ks.backlog = len(excess) > 0 || len(claimed) == free
		for i := range claimed {
			r.inflight[claimed[i].ID] = &flight{ks: ks}
		}
		r.mu.Unlock()
		r.giveBack(ctx, excess)
		if len(claimed) == free {
			more = append(more, kind)
		}
		for i := range claimed {
			job := claimed[i]
			r.workers.Add(1)
			go r.work(ks, &job)
		}
	}
	return more
}

// claimInto claims up to n due jobs of kind, n being its free slots.
// After a poll it first asks a reader whether anything is due, so an idle
// runner polls with reads, not writes. wrote reports whether the claim's
// write ran.
//
// With nothing of kind in flight here, it takes this runner's own lapsed
// leases too: no attempt of its works on them, so they are jobs whose
// claim (or RunNow's leased insert) committed without the answer
// reaching it, and another instance — on a lone instance, no one —
// would otherwise be needed to take them up. With attempts in flight a
// lapsed lease of its own may be one of theirs, whose renewals failed.
func (r *Runner) claimInto(ctx context.Context, kind string, ks *kindState, n int, polled bool) (claimed []Job, wrote bool, err error) {
	r.mu.Lock()
	idle := ks.running == 0
	r.mu.Unlock()
	claim, skip := r.q.db.ClaimJobsIn, r.opts.Owner
	if idle {
		claim, skip = r.q.db.ClaimJobsIdle, ""
	}
	now := r.opts.Clock.Now()
	if polled {
		due, err := r.q.db.AnyJobDue(ctx, kind, r.opts.Lanes, skip, now)
		if err == nil && !due {
			return nil, false, nil
		}
	}
	claimed, err = claim(ctx, kind, r.opts.Lanes, r.opts.Owner, now, now.Add(ks.lease), n)
	return claimed, err == nil, err
}

// giveBack releases claimed jobs this runner has no slot for, uncounted
// as attempts. A release that fails leaves the lease to expire, after
// which any runner takes the job.
func (r *Runner) giveBack(ctx context.Context, jobs []Job) {
	for _, job := range jobs {
		err := r.q.db.ReleaseJob(ctx, job.ID, r.opts.Owner, r.opts.Clock.Now())
		if err != nil && !errors.Is(err, store.ErrLeaseLost) && ctx.Err() == nil {
			r.log.Warn("giving back a job beyond the kind's cap", zap.String("event", "jobs_release_failed"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Error(err))
		}
	}
}

// renewLeases extends the leases of kinds with work in flight once a third
// of their lease has passed, so a slow handler is not mistaken for a dead one.
func (r *Runner) renewLeases(ctx context.Context) {
	now := r.opts.Clock.Now()
	for _, kind := range r.kinds {
		ks := r.handlers[kind]
		r.mu.Lock()
		busy := ks.running > 0
		r.mu.Unlock()
		if !busy || now.Sub(ks.renewedAt) < ks.lease/3 {
			continue
		}
		// The attempts to judge by the renewal: those in flight before it,
		// whose rows it would find if they are still this runner's.
		held := r.runningFlights(ks)
		renewed, err := r.q.db.ExtendJobLeases(ctx, kind, r.opts.Owner, now.Add(ks.lease), now)
		if err != nil {
			if ctx.Err() == nil {
				if log, n := r.renewFailures.Note(r.opts.Clock.Now()); log {
					r.log.Error("renewing leases", zap.String("event", "jobs_renew_failed"), zap.String("kind", kind),
						zap.Int("failures", n), zap.Duration("interval", claimFailureLogEvery), zap.Error(err))
				}
			}
			continue
		}
		if log, n := r.renewFailures.Recovered(); log {
			r.log.Info("renewing leases again", zap.String("event", "jobs_renew_recovered"), zap.Int("failures", n))
		}
		ks.renewedAt = now
		for _, id := range held {
			if !slices.Contains(renewed, id) {
				r.lose(id)
			}
		}
		r.handBackStrays(ctx, ks, renewed)
	}
}

// handBackStrays releases the jobs a renewal of ks's leases found leased
// to this runner with no attempt of its in flight: a claim, or RunNow's
// leased insert, that committed without the answer reaching the runner
// (the connection cut as the commit returned). Nothing works on them,
// and the renewals would keep their leases alive, out of every other
// runner's reach, for as long as other jobs of the kind run here.
// While a RunNow of the kind is between its insert and its flight, a
// job may look so that is not: the next renewal looks again.
func (r *Runner) handBackStrays(ctx context.Context, ks *kindState, renewed []int64) {
	r.mu.Lock()
	if ks.starting > 0 {
		r.mu.Unlock()
		return
	}
	var strays []int64
	for _, id := range renewed {
		if r.inflight[id] == nil {
			strays = append(strays, id)
		}
	}
	r.mu.Unlock()
	for _, id := range strays {
		// The release is guarded on the lease: a job that settled since
		// the renewal found it is left as it is.
		err := r.q.db.ReleaseJob(ctx, id, r.opts.Owner, r.opts.Clock.Now())
		switch {
		case err == nil:
			r.log.Warn("job leased to this runner with no attempt of it running here; handed back",
				zap.String("event", "jobs_stray_released"), zap.String("kind", ks.Kind()), zap.Int64("job", id))
		case !errors.Is(err, store.ErrLeaseLost) && ctx.Err() == nil:
			r.log.Warn("handing back a job leased to this runner with no attempt of it running here", zap.String("event", "jobs_release_failed"),
				zap.String("kind", ks.Kind()), zap.Int64("job", id), zap.Error(err))
		}
	}
}

// runningFlights are the ids of ks's attempts whose handlers run (not
// settling).
func (r *Runner) runningFlights(ks *kindState) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []int64
	for id, f := range r.inflight {
		if f.ks == ks && !f.settling {
			ids = append(ids, id)
		}
	}
	return ids
}

// lose stops the handler of a job whose lease a renewal did not find held
// by this runner: another runner took the job over after the lease lapsed
// (this process was paused, or cut off from the database, for longer than
// the lease), and two runs of one job at once are what leases exist to
// prevent. An attempt that settled meanwhile is left alone. The handler's
// outcome is then neither recorded nor acted on (beginSettle).
func (r *Runner) lose(id int64) {
	r.mu.Lock()
	f := r.inflight[id]
	if f == nil || f.settling || f.lost {
		r.mu.Unlock()
		return
	}
	f.lost = true
	cancel := f.cancel
	r.mu.Unlock()
	r.log.Warn("job taken over by another runner after its lease lapsed; stopping its handler here",
		zap.String("event", "jobs_lease_lost"), zap.String("kind", f.ks.Kind()), zap.Int64("job", id))
	if cancel != nil {
		cancel()
	}
}

// nextWait is how long the loop may sleep: until the earliest due job of a
// kind with free slots, the next lease renewal, or the poll interval.
func (r *Runner) nextWait(ctx context.Context, more bool) time.Duration {
	if more {
		return 0
	}
	now := r.opts.Clock.Now()
	wait := r.opts.PollInterval
	var open []string
	r.mu.Lock()
	for _, kind := range r.kinds {
		ks := r.handlers[kind]
		if ks.running < ks.concurrency {
			open = append(open, kind)
		}
		if ks.running > 0 {
			if d := ks.renewedAt.Add(ks.lease / 3).Sub(now); d < wait {
				wait = d
			}
		}
	}
	r.mu.Unlock()
	if next, ok, err := r.q.db.NextJobDue(ctx, open, r.opts.Lanes); err == nil && ok {
		if d := next.Sub(now); d < wait {
			wait = d
		}
	}
	// A due job that this runner could not claim (another runner holds it)
	// must not spin the loop; the poll interval's tenth bounds the rate.
	if floor := r.opts.PollInterval / 10; wait < floor {
		wait = floor
	}
	return wait
}

// work runs one claimed job to its settling write.
//
// It reports whether the job was settled as done.
func (r *Runner) work(ks *kindState, job *Job) (completed bool) {
	defer r.workers.Done()
	defer func() {
		r.mu.Lock()
		ks.running--
		delete(r.inflight, job.ID)
		backlog := ks.backlog
		r.mu.Unlock()
		if backlog {
			// A slot opened on a kind that had more waiting.
			r.wakeKind(job.Kind)
		}
	}()
	now := r.opts.Clock.Now()
	switch {
	case !r.beginSettle(job.ID):
		return
	case job.AbandonOwed:
		// Cancelled while it waited: claimed for its Abandon alone.
		r.payAbandon(ks, job)
		return
	case job.CancelRequested:
		r.retire(ks, job, store.JobCancelled, cancelledReason)
		return
	case !job.Deadline.IsZero() && !now.Before(job.Deadline):
		r.retire(ks, job, store.JobFailed, withLast("deadline passed", job.LastError))
		return
	case job.Attempts > job.MaxAttempts:
		// The last allowed attempt was started by a runner that died.
		r.retire(ks, job, store.JobFailed, withLast("attempts exhausted", job.LastError))
		return
	}
	ctx, cancel := context.WithCancel(r.workCtx)
	r.mu.Lock()
	if f := r.inflight[job.ID]; f != nil {
		// Not settling: a renewal that finds the job taken over now
		// cancels the handler (lose). It cannot have found it so
		// before, while the flight was settling.
		f.settling = false
		f.cancel = cancel
	}
	r.mu.Unlock()
	out := r.runSafely(ctx, ks, job)
	cancel()
	if r.beginSettle(job.ID) {
		return r.settle(ks, job, out)
	}
	return false
}

// beginSettle marks a flight as settling unless Stop released it first,
// or a renewal found its job taken over (lose): that job is another
// runner's now, and neither its outcome nor an abandon is this one's to
// write — a retirement here would run the handler's Abandon on the
// job the other runner is working on.
func (r *Runner) beginSettle(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.inflight[id]
	if f == nil {
		return true // not tracked: nothing can have released it
	}
	if f.released || f.lost {
		return false
	}
	f.settling = true
	return true
}

func withLast(what, last string) string {
	if last == "" {
		return what
	}
	return what + "; last error: " + last
}

// runSafely runs the handler, turning a panic into a retry, and logs
// the panics, those a handler recovered from itself too.
func (r *Runner) runSafely(ctx context.Context, ks *kindState, job *Job) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.logPanic(job, &recovered{value: p, stack: string(debug.Stack())})
			out = Retry(fmt.Sprintf("handler panicked: %v", p))
		}
	}()
	out = ks.Run(ctx, job)
	if out.panicked != nil {
		r.logPanic(job, out.panicked)
	}
	if out.kind == 0 {
		out = Retry("handler returned no outcome")
	}
	return out
}

func (r *Runner) logPanic(job *Job, p *recovered) {
	r.log.Error("job handler panicked", zap.String("event", "jobs_handler_panic"),
		zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Any("panic", p.value), zap.String("stack", p.stack))
}

// settle writes an attempt's outcome, guarded on this runner's lease.
func (r *Runner) settle(ks *kindState, job *Job, out Outcome) (completed bool) {
	now := r.opts.Clock.Now()
	var (
		status store.JobStatus
		err    error
	)
	switch out.kind {
	case outcomeDone:
		err = r.persist(job, func(ctx context.Context) (err error) {
			status, err = r.q.db.CompleteJob(ctx, job.ID, r.opts.Owner, now)
			return err
		})
	case outcomeFailed:
		r.retire(ks, job, store.JobFailed, out.reason)
		return false
	case outcomeReschedule:
		err = r.persist(job, func(ctx context.Context) (err error) {
			status, err = r.q.db.RescheduleJob(ctx, job.ID, r.opts.Owner, now.Add(out.after), now)
			return err
		})
	case outcomeRetry, outcomeRetryAfter:
		refund := out.kind == outcomeRetryAfter && !out.spend
		if !refund && job.Attempts >= job.MaxAttempts {
			r.retireUnretried(ks, job, "attempts exhausted; last error: "+out.reason)
			return false
		}
		delay := out.after
		if !refund {
			delay = max(r.backoff(job.Attempts), out.after)
		}
		runAt := now.Add(delay)
		if !job.Deadline.IsZero() && !runAt.Before(job.Deadline) {
			r.retireUnretried(ks, job, "deadline passes before the next attempt; last error: "+out.reason)
			return false
		}
		err = r.persist(job, func(ctx context.Context) (err error) {
			status, err = r.q.db.RetryJob(ctx, job.ID, r.opts.Owner, runAt, out.reason, refund, now)
			return err
		})
	}
	if err != nil {
		r.logSettleError(job, err)
		return false
	}
	if status == store.JobRunning {
		// An operator cancelled it while this attempt ran: the guarded
		// write above left it running under this runner's lease, to be
		// retired as cancelled once its Abandon succeeded — or, should
		// this runner stop first, reclaimed and abandoned by the next.
		r.retire(ks, job, store.JobCancelled, cancelledReason)
		return false
	}
	if out.kind == outcomeDone && status == store.JobReady {
		// Asked to run again while this attempt ran (Spec.Rerun): ready
		// again, not done. The loop learns when it is due.
		r.wakeKind(job.Kind)
		return false
	}
	return out.kind == outcomeDone
}

// retire abandons a job and then settles it for good. Abandon runs while
// the lease is still held, so no other runner can retire it concurrently,
// and is tried again through an outage before the job is retired: its
// side effects are not lost to one. A runner that stops before Abandon
// succeeded leaves the job unretired, as a crash would: it is reclaimed
// when its lease lapses.
func (r *Runner) retire(ks *kindState, job *Job, status store.JobStatus, reason string) {
	if !r.abandonDurably(ks, job, reason) {
		return
	}
	now := r.opts.Clock.Now()
	if err := r.persist(job, func(ctx context.Context) error {
		return r.q.db.RetireJob(ctx, job.ID, r.opts.Owner, status, reason, now)
	}); err != nil {
		r.logSettleError(job, err)
	}
}

// payAbandon runs the Abandon a job cancelled while it waited owes (see
// store.Job.AbandonOwed), as retire does for a job it retires, and then
// records it run. The job is settled already: it stays cancelled
// throughout. A runner that stops before the Abandon succeeded leaves it
// owed, to be claimed again when the lease lapses.
func (r *Runner) payAbandon(ks *kindState, job *Job) {
	if !r.abandonDurably(ks, job, cancelledReason) {
		return
	}
	if err := r.persist(job, func(ctx context.Context) error {
		return r.q.db.SettleJobAbandon(ctx, job.ID, r.opts.Owner, r.opts.Clock.Now())
	}); err != nil {
		r.logSettleError(job, err)
	}
}

// retireUnretried retires a job whose attempt asked for a retry it has no
// attempt or time left for: as failed, for reason — or, when an operator
// cancelled it while the attempt ran, as cancelled, as settle does after
// RetryJob: the cancel is why it is not retried.
func (r *Runner) retireUnretried(ks *kindState, job *Job, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), settleWriteTimeout)
	cur, err := r.q.db.GetJob(ctx, job.ID)
	cancel()
	if err == nil && cur.CancelRequested && cur.Status == store.JobRunning && cur.LeaseOwner == r.opts.Owner {
		r.retire(ks, job, store.JobCancelled, cancelledReason)
		return
	}
	r.retire(ks, job, store.JobFailed, reason)
}

// abandonTimeout bounds the context a handler's Abandon runs with.
const abandonTimeout = 30 * time.Second

// abandonDurably runs the handler's Abandon until it succeeds, as persist
// does a settling write: an Abandon that failed (the database away) is
// tried again with backoff, the attempt staying in flight so its lease
// keeps being renewed. It gives up after AbandonRetry, logging it, and
// reports true: retire the job all the same. It reports false when the
// runner stopped first: retire then leaves the job to be reclaimed and
// abandoned again, as after a crash. A job an operator cancelled while
// its attempt ran takes the same path: the settling write leaves it
// running for retire (see settle), as no retired job is reclaimed.
func (r *Runner) abandonDurably(h Handler, job *Job, reason string) bool {
	began := r.opts.Clock.Now()
	delay := 100 * time.Millisecond
	failures := logevery.Limiter{Every: time.Minute}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
		err := r.abandon(ctx, h, job, reason)
		cancel()
		switch {
		case err == nil:
			return true
		case r.workCtx.Err() != nil:
			r.log.Warn("job's abandon did not succeed before the runner stopped",
				zap.String("event", "jobs_abandon_interrupted"), zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Error(err))
			return false
		case r.opts.Clock.Now().Sub(began) >= r.opts.AbandonRetry:
			r.log.Error("job's abandon kept failing; retiring the job without it", zap.String("event", "jobs_abandon_failed"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Duration("tried_for", r.opts.AbandonRetry), zap.Error(err))
			return true
		}
		if log, n := failures.Note(time.Now()); log {
			r.log.Warn("job's abandon failed; trying again", zap.String("event", "jobs_abandon_retrying"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Int("failures", n), zap.Error(err))
		}
		r.backOff(&delay)
	}
}

// backOff waits delay, or until the runner's work ends, and doubles delay
// up to 5 s: the pace at which persist and abandonDurably try a write
// again through an outage. It reports whether the runner still works.
func (r *Runner) backOff(delay *time.Duration) bool {
	t := time.NewTimer(*delay)
	defer t.Stop()
	select {
	case <-r.workCtx.Done():
		return false
	case <-t.C:
	}
	if *delay < 5*time.Second {
		*delay *= 2
	}
	return true
}

// abandon runs the handler's Abandon, recovering a panic: in a worker
// goroutine it would end the process, and the job, reclaimed after a
// restart and abandoned again, would end the next one too. The panic is
// logged and taken as done: the job is retired all the same (an Abandon
// that panics would panic again).
func (r *Runner) abandon(ctx context.Context, h Handler, job *Job, reason string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("job handler's abandon panicked", zap.String("event", "jobs_abandon_panic"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Any("panic", p), zap.StackSkip("stack", 1))
			err = nil
		}
	}()
	return h.Abandon(ctx, job, reason)
}

// persist retries a settling write that failed for a reason other than a
// lost lease (the database locked by a backup beyond the busy timeout, a
// full disk, a PostgreSQL restart) for as long as the runner works: until
// Stop, done waiting for handlers, cancels the runner's work context. While
// it retries the attempt stays in flight, so its lease keeps being
// renewed; giving up earlier would leave the job running under a lease
// that no claim of this runner takes back (and that its renewals keep
// alive while other jobs of the kind run): stuck until the next start.
// Each write has a context of its own, so one that Stop's cancel finds
// under way still lands (Stop gives it a moment). The failures are
// logged the first time, then once a minute.
func (r *Runner) persist(job *Job, write func(ctx context.Context) error) error {
	delay := 100 * time.Millisecond
	failures := logevery.Limiter{Every: time.Minute}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), settleWriteTimeout)
		err := write(ctx)
		cancel()
		if err == nil || errors.Is(err, store.ErrLeaseLost) || r.workCtx.Err() != nil {
			return err
		}
		if log, n := failures.Note(time.Now()); log {
			r.log.Warn("recording a job's outcome failed; trying again", zap.String("event", "jobs_settle_retrying"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Int("failures", n), zap.Error(err))
		}
		if !r.backOff(&delay) {
			return err
		}
	}
}

// settleWriteTimeout bounds one try of a settling write (one that waits
// on a lock, say); persist tries again after it.
const settleWriteTimeout = 30 * time.Second

func (r *Runner) logSettleError(job *Job, err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		r.log.Warn("job lease lost before its attempt was recorded", zap.String("event", "jobs_lease_lost"),
			zap.String("kind", job.Kind), zap.Int64("job", job.ID))
		return
	}
	r.log.Error("recording job outcome", zap.String("event", "jobs_settle_failed"),
		zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.Error(err))
}

// backoff is base·2^(attempt−1), capped, spread by ±Jitter.
func (r *Runner) backoff(attempt int) time.Duration {
	d := r.opts.BackoffBase
	for i := 1; i < attempt && d < r.opts.BackoffCap; i++ {
		d *= 2
	}
	if d > r.opts.BackoffCap {
		d = r.opts.BackoffCap
	}
	spread := 1 + r.opts.Jitter*(2*mrand.Float64()-1)
	return time.Duration(float64(d) * spread)
}
