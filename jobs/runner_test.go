package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestTransientFailuresAreRetriedWithGrowingGapsUntilSuccess(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const failures = 4
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)

		var runs atomic.Int32
		h := newFuncHandler("flaky", func(_ context.Context, job *Job) Outcome {
			if n := runs.Add(1); n <= failures {
				return Retry(fmt.Sprintf("transient #%d", n))
			}
			return Done()
		})
		r := startRunner(t, q, RunnerOptions{Clock: clk, BackoffBase: time.Second, BackoffCap: time.Hour, PollInterval: 500 * time.Millisecond}, h)

		job, _, err := q.Enqueue(ctx, Spec{Kind: "flaky", MaxAttempts: failures + 1})
		if err != nil {
			t.Fatal(err)
		}
		// Drive time: whenever the runner is idle, read the waiting job's
		// schedule, then jump to the instant the runner waits for. A settled
		// retry cannot change until the clock reaches its run_at, so every
		// scheduled gap is seen. No real sleeping for backoff.
		var gaps []time.Duration
		for {
			waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
			j, err := q.Get(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status == store.JobDone {
				break
			}
			if j.Status == store.JobReady && j.Attempts > len(gaps) {
				gaps = append(gaps, j.RunAt.Sub(j.UpdatedAt))
			}
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatalf("after %d runs: %v", runs.Load(), err)
			}
			clk.Set(at)
		}
		if runs.Load() != failures+1 {
			t.Fatalf("handler ran %d times, want %d", runs.Load(), failures+1)
		}
		if got, _ := q.Get(ctx, job.ID); got.Attempts != failures+1 {
			t.Errorf("attempts = %d, want %d", got.Attempts, failures+1)
		}
		if len(gaps) != failures {
			t.Fatalf("saw %d retry gaps, want %d", len(gaps), failures)
		}
		for i, gap := range gaps {
			want := time.Second << i // base·2^(attempt−1)
			lo, hi := time.Duration(float64(want)*0.9), time.Duration(float64(want)*1.1)
			if gap < lo || gap > hi {
				t.Errorf("gap after attempt %d = %s, want %s ±10%%", i+1, gap, want)
			}
			if i > 0 && gap <= gaps[i-1] {
				t.Errorf("gap after attempt %d (%s) did not grow from %s", i+1, gap, gaps[i-1])
			}
		}
		if len(h.abandons(job.ID)) != 0 {
			t.Errorf("a job that succeeded was abandoned: %v", h.abandons(job.ID))
		}
	})
}

func TestRetiredJobsAreAbandonedExactlyOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name       string
			outcome    Outcome
			attempts   int
			wantRuns   int
			wantReason string
		}{
			{"failed/first attempt", Failed("the CA said no"), 5, 1, "the CA said no"},
			{"exhausted/after every attempt", Retry("still down"), 3, 3, "attempts exhausted; last error: still down"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				q := NewQueue(openDB(t, ""), nil)
				var runs atomic.Int32
				h := newFuncHandler("k", func(context.Context, *Job) Outcome { runs.Add(1); return tc.outcome })
				startRunner(t, q, RunnerOptions{BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}, h)
				job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", MaxAttempts: tc.attempts})
				if err != nil {
					t.Fatal(err)
				}
				got := waitStatus(t, q, job.ID, store.JobFailed)
				if int(runs.Load()) != tc.wantRuns {
					t.Errorf("ran %d times, want %d", runs.Load(), tc.wantRuns)
				}
				if got.LastError != tc.wantReason {
					t.Errorf("last error %q, want %q", got.LastError, tc.wantReason)
				}
				if a := h.abandons(job.ID); len(a) != 1 || a[0] != tc.wantReason {
					t.Errorf("abandon calls = %q, want exactly [%q]", a, tc.wantReason)
				}
			})
		}
	})
}

func TestTwoRunnersOnOneDatabaseAbandonEachRetiredJobOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const n = 60
		path := newPlace(t)
		q1, q2 := NewQueue(openDB(t, path), nil), NewQueue(openDB(t, path), nil)
		fail := func(_ context.Context, job *Job) Outcome {
			if job.ID%2 == 0 {
				return Failed("permanent")
			}
			return Retry("transient")
		}
		h1, h2 := newFuncHandler("k", fail), newFuncHandler("k", fail)
		opts := RunnerOptions{BackoffBase: time.Millisecond, BackoffCap: time.Millisecond, PollInterval: 5 * time.Millisecond}
		startRunner(t, q1, opts, h1)
		startRunner(t, q2, opts, h2)

		var ids []int64
		for i := 0; i < n; i++ {
			q := q1
			if i%2 == 1 {
				q = q2
			}
			j, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", MaxAttempts: 3})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		for _, id := range ids {
			waitStatus(t, q1, id, store.JobFailed)
		}
		for _, id := range ids {
			if calls := len(h1.abandons(id)) + len(h2.abandons(id)); calls != 1 {
				t.Errorf("job %d abandoned %d times across both runners, want 1", id, calls)
			}
		}
	})
}

func TestTwoRunnersOnSeparateHandlesRunEachOfAThousandJobsOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const n = 1000
		path := newPlace(t)
		q1, q2 := NewQueue(openDB(t, path), nil), NewQueue(openDB(t, path), nil)

		var (
			mu   sync.Mutex
			seen = map[int64]int{}
		)
		// A barrier makes both runners claim from the same backlog: every
		// handler waits until each runner has started a job. A runner holds
		// at most its concurrency (8) of the thousand, so the other one must
		// claim some before anything settles; without it the first runner
		// can settle the whole backlog before the second one's first claim.
		var (
			byRunner [2]atomic.Int32
			first    [2]sync.Once
			began    = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		)
		handler := func(i int) *funcHandler {
			return newFuncHandler("k", func(ctx context.Context, job *Job) Outcome {
				byRunner[i].Add(1)
				first[i].Do(func() { close(began[i]) })
				for _, c := range began {
					select {
					case <-c:
					case <-ctx.Done():
						return Retry("stopped before both runners started")
					}
				}
				mu.Lock()
				seen[job.ID]++
				mu.Unlock()
				return Done()
			})
		}
		opts := RunnerOptions{PollInterval: 5 * time.Millisecond}

		// Queue everything first through a third handle, so both runners race
		// for the same backlog.
		producer := NewQueue(openDB(t, path), nil)
		for i := 0; i < n; i++ {
			if _, _, err := producer.Enqueue(context.Background(), Spec{Kind: "k", Payload: map[string]int{"i": i}}); err != nil {
				t.Fatal(err)
			}
		}
		startRunner(t, q1, opts, handler(0))
		startRunner(t, q2, opts, handler(1))
		waitFor(t, "both runners to claim a job of the shared backlog", func() bool {
			return byRunner[0].Load() > 0 && byRunner[1].Load() > 0
		})
		waitForWithin(t, 2*time.Minute, "all jobs to settle", func() bool {
			counts, err := producer.Count(context.Background())
			return err == nil && len(counts) == 1 && counts[0].Status == store.JobDone && counts[0].N == n
		})

		mu.Lock()
		defer mu.Unlock()
		if len(seen) != n {
			t.Fatalf("%d distinct jobs ran, want %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Errorf("job %d ran %d times", id, c)
			}
		}
		if ran := byRunner[0].Load() + byRunner[1].Load(); ran != n {
			t.Errorf("the runners started %d attempts (%d + %d), want %d", ran, byRunner[0].Load(), byRunner[1].Load(), n)
		}
		t.Logf("runner 1 ran %d, runner 2 ran %d", byRunner[0].Load(), byRunner[1].Load())
	})
}

func TestAJobLeftLeasedByADeadRunnerIsReclaimedAfterItsLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		path := newPlace(t)
		clk := clocktest.New(start)

		// The dead process: it claimed the job and then vanished.
		deadDB := openDB(t, path)
		dead := NewQueue(deadDB, clk)
		job, _, err := dead.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		const lease = 30 * time.Second
		if got, err := deadDB.ClaimJobs(ctx, "k", "dead-runner", clk.Now(), clk.Now().Add(lease), 1); err != nil || len(got) != 1 {
			t.Fatalf("dead runner's claim: %v %v", got, err)
		}

		ran := make(chan int, 1)
		h := newFuncHandler("k", func(_ context.Context, j *Job) Outcome { ran <- j.Attempts; return Done() })
		h.lease = lease
		r := startRunner(t, NewQueue(openDB(t, path), clk), RunnerOptions{Clock: clk, PollInterval: time.Second}, h)

		for clk.Now().Before(start.Add(lease)) {
			select {
			case <-ran:
				t.Fatalf("job ran at %s, before the dead runner's lease expired", clk.Now().Sub(start))
			default:
			}
			waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clk.Set(at)
		}
		select {
		case attempts := <-ran:
			if attempts != 2 {
				t.Errorf("reclaimed run is attempt %d, want 2", attempts)
			}
		case <-ctx.Done():
			t.Fatal("job was never reclaimed")
		}
		got := waitStatus(t, dead, job.ID, store.JobDone)
		if got.LeaseOwner != "" {
			t.Errorf("lease owner %q left on a done job", got.LeaseOwner)
		}
	})
}

func TestAJobPastItsDeadlineIsRetiredWithoutRunning(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		var runs atomic.Int32
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { runs.Add(1); return Done() })
		job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", Deadline: start.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute) // the process was down past the deadline
		startRunner(t, q, RunnerOptions{Clock: clk}, h)

		got := waitStatus(t, q, job.ID, store.JobFailed)
		if runs.Load() != 0 {
			t.Errorf("handler ran %d times after the deadline", runs.Load())
		}
		if !strings.Contains(got.LastError, "deadline passed") {
			t.Errorf("last error %q does not say the deadline passed", got.LastError)
		}
		if a := h.abandons(job.ID); len(a) != 1 {
			t.Errorf("abandon called %d times, want 1", len(a))
		}
	})
}

// A retry whose next attempt would come at or after the job's deadline
// retires the job at once, saying so, rather than leaving it waiting to be
// retired when it is next claimed; one whose next attempt comes before the
// deadline waits for it.
func TestARetryWhoseNextAttemptFallsPastTheDeadlineRetiresTheJobAtOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name         string
			deadline     time.Duration // after start; every backoff here is about 5m
			wantStatus   store.JobStatus
			wantReason   string
			wantAbandons int
		}{
			{"retired/the next attempt would fall past the deadline", time.Minute, store.JobFailed,
				"deadline passes before the next attempt; last error: upstream down", 1},
			{"rescheduled/the next attempt falls before the deadline", time.Hour, store.JobReady, "upstream down", 0},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				clk := clocktest.New(start)
				q := NewQueue(openDB(t, ""), clk)
				var runs atomic.Int32
				h := newFuncHandler("k", func(context.Context, *Job) Outcome { runs.Add(1); return Retry("upstream down") })
				job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", Deadline: start.Add(tc.deadline), MaxAttempts: 5})
				if err != nil {
					t.Fatal(err)
				}
				startRunner(t, q, RunnerOptions{Clock: clk, BackoffBase: 5 * time.Minute, BackoffCap: 5 * time.Minute}, h)
				var got Job
				waitFor(t, "the first attempt recorded", func() bool {
					got, err = q.Get(context.Background(), job.ID)
					return err == nil && got.Attempts == 1 && got.LastError != ""
				})
				if got.Status != tc.wantStatus || got.LastError != tc.wantReason {
					t.Errorf("after one attempt the job is %s with %q; want %s with %q", got.Status, got.LastError, tc.wantStatus, tc.wantReason)
				}
				if n := runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times; want once (the clock did not move)", n)
				}
				if a := h.abandons(job.ID); len(a) != tc.wantAbandons {
					t.Errorf("abandon calls %q; want %d", a, tc.wantAbandons)
				}
			})
		}
	})
}

func TestRetryAfterAnExplicitDelayDoesNotSpendAnAttempt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		const rateLimited = 5
		var runs atomic.Int32
		h := newFuncHandler("k", func(context.Context, *Job) Outcome {
			if runs.Add(1) <= rateLimited {
				return RetryAfter("429 from upstream", 10*time.Second)
			}
			return Done()
		})
		r := startRunner(t, q, RunnerOptions{Clock: clk}, h)
		// One attempt allowed: five rate-limited rounds must not use it up.
		job, _, err := q.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		for runs.Load() < rateLimited+1 {
			waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clk.Set(at)
		}
		got := waitStatus(t, q, job.ID, store.JobDone)
		if got.Attempts != 1 {
			t.Errorf("attempts = %d after %d rate-limited rounds, want 1", got.Attempts, rateLimited)
		}
		if elapsed := clk.Now().Sub(start); elapsed < rateLimited*10*time.Second {
			t.Errorf("finished after %s, the explicit delays were not honoured", elapsed)
		}
	})
}

// RetryNoSooner honours the other side's pause and spends the attempt:
// a side that asks for no pause at all, every time, has the job tried
// MaxAttempts times and retired, not every poll until its deadline; a
// pause longer than the backoff is waited out.
func TestRetryNoSoonerWaitsTheGivenPauseAndSpendsTheAttempt(t *testing.T) {
	tests := []struct {
		name        string
		pause       time.Duration
		maxAttempts int
		wantStatus  store.JobStatus
		wantRuns    int32
	}{
		{name: "fail/no pause, every time: retired after its attempts", pause: 0, maxAttempts: 3, wantStatus: store.JobFailed, wantRuns: 3},
		{name: "fail/a long pause is waited out, and each one spends an attempt", pause: time.Hour, maxAttempts: 3, wantStatus: store.JobFailed, wantRuns: 3},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				clk := clocktest.New(start)
				q := NewQueue(openDB(t, ""), clk)
				var runs atomic.Int32
				h := newFuncHandler("k", func(context.Context, *Job) Outcome {
					runs.Add(1)
					return RetryNoSooner("503 from the receiver", tt.pause)
				})
				r := startRunner(t, q, RunnerOptions{Clock: clk}, h)
				job, _, err := q.Enqueue(ctx, Spec{Kind: "k", MaxAttempts: tt.maxAttempts, Deadline: start.Add(24 * time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				for {
					if ctx.Err() != nil {
						t.Fatalf("the job did not settle: %v", ctx.Err())
					}
					waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
					j, err := q.Get(ctx, job.ID)
					if err != nil {
						t.Fatal(err)
					}
					if j.Status == store.JobRunning || j.Status == store.JobReady && !j.RunAt.After(clk.Now()) {
						time.Sleep(5 * time.Millisecond) // claimed, or about to be
						continue
					}
					if j.Status != store.JobReady {
						break
					}
					at, err := clk.NextTimer(ctx)
					if err != nil {
						t.Fatal(err)
					}
					clk.Set(at)
				}
				got := waitStatus(t, q, job.ID, tt.wantStatus)
				if n := runs.Load(); n != tt.wantRuns || got.Attempts != tt.maxAttempts {
					t.Errorf("ran %d times, %d attempts recorded; want %d runs and %d attempts", n, got.Attempts, tt.wantRuns, tt.maxAttempts)
				}
				if want := time.Duration(tt.maxAttempts-1) * tt.pause; clk.Now().Sub(start) < want {
					t.Errorf("retired after %s; the pauses (%s) were not waited out", clk.Now().Sub(start), want)
				}
				if a := h.abandons(job.ID); len(a) != 1 {
					t.Errorf("abandon called %d times, want 1", len(a))
				}
			})
		}
	})
}

func TestEnqueueWakesTheLocalRunnerWithoutWaitingForAPoll(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// On a fake clock the poll never fires unless the test moves time, so
		// only the wake-up can start the job.
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		ran := make(chan struct{}, 1)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { ran <- struct{}{}; return Done() })
		startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: time.Hour}, h)
		// The runner's only timer is its loop's: once it is armed, the loop
		// has looked for work, found none, and sleeps.
		at, err := clk.NextTimer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := start.Add(time.Hour); !at.Equal(want) {
			t.Fatalf("the idle runner sleeps until +%s, want its hour-long poll", at.Sub(start))
		}
		if _, _, err := q.Enqueue(ctx, Spec{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("job did not start although its runner was woken")
		}
	})
}

func TestStopReleasesTheLeasesOfHandlersItHadToAbandon(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		path := newPlace(t)
		q := NewQueue(openDB(t, path), nil)
		started := make(chan struct{})
		h := newFuncHandler("k", func(ctx context.Context, _ *Job) Outcome {
			close(started)
			<-ctx.Done()
			return Retry("interrupted")
		})
		r, err := NewRunner(q, []Handler{h}, RunnerOptions{StopTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		job, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k", MaxAttempts: 1})
		<-started
		if err := r.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if r.Running() != 0 {
			t.Errorf("Stop returned with %d handlers running", r.Running())
		}
		// The handler returned a Retry on its last attempt once cancelled; a
		// released job is not this runner's to retire, so it is not abandoned.
		if a := h.abandons(job.ID); len(a) != 0 {
			t.Errorf("the released job was abandoned by the runner that released it: %q", a)
		}
		got, _ := q.Get(context.Background(), job.ID)
		if got.Status != store.JobReady || got.LeaseOwner != "" || got.Attempts != 0 {
			t.Fatalf("after stop the job is %s owner=%q attempts=%d; want ready, unleased, attempt refunded",
				got.Status, got.LeaseOwner, got.Attempts)
		}
		// Another runner takes it at once, without waiting for the old lease.
		done := make(chan struct{})
		h2 := newFuncHandler("k", func(context.Context, *Job) Outcome { close(done); return Done() })
		startRunner(t, NewQueue(openDB(t, path), nil), RunnerOptions{}, h2)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("released job was not picked up by the next runner")
		}
		waitStatus(t, q, job.ID, store.JobDone)
		if a := append(h.abandons(job.ID), h2.abandons(job.ID)...); len(a) != 0 {
			t.Errorf("a job that succeeded on its next runner was abandoned: %q", a)
		}
	})
}

// A handler that works for longer than its lease keeps its job: the runner
// renews the lease while the handler runs, so a second runner polling the
// same store never takes the job for a dead process's.
func TestALeaseIsRenewedWhileItsHandlerRunsSoNoOtherRunnerTakesTheJob(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const lease = 30 * time.Second
		path := newPlace(t)
		// One fake clock per runner, both kept at the same time. Each runner's
		// loop is the only thing arming timers on its clock, so NextTimer
		// returning says that runner has finished its turn (claim, renew) and
		// sleeps: the test moves time only when both are parked.
		clkA, clkB := clocktest.New(start), clocktest.New(start)
		qA, qB := NewQueue(openDB(t, path), clkA), NewQueue(openDB(t, path), clkB)

		started, release := make(chan struct{}, 1), make(chan struct{})
		var runsA, runsB atomic.Int32
		hA := newFuncHandler("slow", func(ctx context.Context, _ *Job) Outcome {
			runsA.Add(1)
			started <- struct{}{}
			select {
			case <-release:
				return Done()
			case <-ctx.Done():
				return Retry("stopped")
			}
		})
		hB := newFuncHandler("slow", func(context.Context, *Job) Outcome { runsB.Add(1); return Done() })
		hA.lease, hB.lease = lease, lease
		rA := startRunner(t, qA, RunnerOptions{Clock: clkA, PollInterval: lease / 3}, hA)
		job, _, err := qA.Enqueue(ctx, Spec{Kind: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the job never started")
		}
		// The second runner starts once the first holds the job; started
		// before, it could claim the fresh job first, which is fair play.
		startRunner(t, qB, RunnerOptions{Clock: clkB, PollInterval: lease / 3}, hB)
		claimed, err := qA.Get(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		leaseUntil := claimed.LeaseUntil
		// Three leases' worth of time, in the runners' own steps.
		for clkA.Now().Before(start.Add(3 * lease)) {
			at, err := clkA.NextTimer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := clkB.NextTimer(ctx); err != nil {
				t.Fatal(err)
			}
			j, err := qA.Get(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			elapsed := clkA.Now().Sub(start)
			if j.Status != store.JobRunning || j.LeaseOwner != rA.Owner() {
				t.Fatalf("at +%s the job is %s, leased to %q; want running under the runner still working on it", elapsed, j.Status, j.LeaseOwner)
			}
			if !j.LeaseUntil.After(clkA.Now()) {
				t.Fatalf("at +%s the lease ran out (at +%s) while its handler still ran", elapsed, j.LeaseUntil.Sub(start))
			}
			if j.LeaseUntil.Before(leaseUntil) {
				t.Fatalf("at +%s the lease moved back from +%s to +%s", elapsed, leaseUntil.Sub(start), j.LeaseUntil.Sub(start))
			}
			leaseUntil = j.LeaseUntil
			clkA.Set(at)
			clkB.Set(at)
		}
		if moved := leaseUntil.Sub(claimed.LeaseUntil); moved < 2*lease {
			t.Errorf("over %s of running the lease moved %s, want at least %s", 3*lease, moved, 2*lease)
		}

		close(release)
		got := waitStatus(t, qA, job.ID, store.JobDone)
		if runsA.Load() != 1 || runsB.Load() != 0 {
			t.Errorf("the job ran %d times on its runner and %d on the other, want once on its runner", runsA.Load(), runsB.Load())
		}
		if got.Attempts != 1 {
			t.Errorf("attempts = %d, want 1", got.Attempts)
		}
	})
}

// Stop gives up on a handler that ignores cancellation and hands its job
// back (ReleaseJob). When that handler returns at last, the stopped runner
// must record nothing — not its outcome, not an Abandon: the job belongs to
// whichever runner took it next. Here the next runner has the same owner
// name (a restart with RunnerOptions.Owner set), so the store's lease guard
// cannot tell the two attempts apart; only the released flight can.
func TestAHandlerStopGaveUpOnRecordsNothingWhenItReturnsLate(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name    string
			outcome Outcome
		}{
			{"late/done", Done()},
			{"late/failed", Failed("the CA said no")},
			{"late/retry with no attempt left", Retry("still down")},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				const owner = "configured-owner"
				path := newPlace(t)
				q1 := NewQueue(openDB(t, path), nil)
				started, finish := make(chan struct{}), make(chan struct{})
				var finishOnce sync.Once
				finishOld := func() { finishOnce.Do(func() { close(finish) }) }
				t.Cleanup(finishOld)
				h1 := newFuncHandler("k", func(context.Context, *Job) Outcome {
					close(started)
					<-finish // ignores cancellation: its work ends when it ends
					return tc.outcome
				})
				old, err := NewRunner(q1, []Handler{h1}, RunnerOptions{Owner: owner, StopTimeout: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if err := old.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				job, _, err := q1.Enqueue(context.Background(), Spec{Kind: "k", MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				<-started
				if err := old.Stop(); err != nil {
					t.Fatalf("stop: %v", err)
				}
				if old.Running() != 1 {
					t.Fatalf("after stop %d handlers are in flight, want the one that ignores cancellation", old.Running())
				}
				if got, _ := q1.Get(context.Background(), job.ID); got.Status != store.JobReady || got.LeaseOwner != "" || got.Attempts != 0 {
					t.Fatalf("after stop the job is %s owner=%q attempts=%d; want released", got.Status, got.LeaseOwner, got.Attempts)
				}

				// The restarted runner takes the job and is still working on it.
				q2 := NewQueue(openDB(t, path), nil)
				started2, finish2 := make(chan struct{}), make(chan struct{})
				h2 := newFuncHandler("k", func(ctx context.Context, _ *Job) Outcome {
					close(started2)
					select {
					case <-finish2:
						return Done()
					case <-ctx.Done():
						return Retry("stopped")
					}
				})
				startRunner(t, q2, RunnerOptions{Owner: owner}, h2)
				select {
				case <-started2:
				case <-time.After(5 * time.Second):
					t.Fatal("the released job was not taken by the restarted runner")
				}

				finishOld()
				waitFor(t, "the stopped runner's handler to return", func() bool { return old.Running() == 0 })
				got, err := q2.Get(context.Background(), job.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != store.JobRunning || got.LeaseOwner != owner || got.Attempts != 1 {
					t.Errorf("after the stopped runner's handler returned %s the job is %s owner=%q attempts=%d; want still running the restarted runner's attempt",
						tc.outcome, got.Status, got.LeaseOwner, got.Attempts)
				}
				if a := h1.abandons(job.ID); len(a) != 0 {
					t.Errorf("the stopped runner abandoned a job it had released: %q", a)
				}

				close(finish2)
				waitStatus(t, q2, job.ID, store.JobDone)
				if a := append(h1.abandons(job.ID), h2.abandons(job.ID)...); len(a) != 0 {
					t.Errorf("a job that succeeded was abandoned: %q", a)
				}
			})
		}
	})
}

func TestOperatorCancelAbandonsAWaitingJobOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
		r := startRunner(t, q, RunnerOptions{}, h)
		job, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k", Delay: time.Hour})
		got, err := q.Cancel(context.Background(), job.ID)
		if err != nil || got.Status != store.JobCancelled {
			t.Fatalf("cancel: %+v %v", got, err)
		}
		if _, err := q.Cancel(context.Background(), job.ID); !errors.Is(err, store.ErrWrongState) {
			t.Errorf("second cancel: %v, want ErrWrongState", err)
		}
		// The runner abandons it in a moment (Cancel does not wait).
		waitFor(t, "the abandon to be recorded", func() bool { return !abandonOwed(t, q, job.ID) })
		if err := r.Stop(); err != nil { // no Abandon can be still on its way
			t.Fatal(err)
		}
		if a := h.abandons(job.ID); len(a) != 1 || a[0] != cancelledReason {
			t.Errorf("abandon calls %q, want one %q", a, cancelledReason)
		}
	})
}

func TestOperatorCancelOfARunningJobRetiresItAfterTheAttempt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome {
			started <- struct{}{}
			<-release
			return Retry("still failing")
		})
		startRunner(t, q, RunnerOptions{}, h)
		job, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k"})
		<-started
		if _, err := q.Cancel(context.Background(), job.ID); err != nil {
			t.Fatal(err)
		}
		close(release)
		waitStatus(t, q, job.ID, store.JobCancelled)
		<-h.abandonCh
		if a := h.abandons(job.ID); len(a) != 1 {
			t.Errorf("abandon calls %q, want one", a)
		}
	})
}

func TestRetryNowRunsAWaitingJobAtOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		ran := make(chan struct{}, 1)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { ran <- struct{}{}; return Done() })
		startRunner(t, q, RunnerOptions{PollInterval: time.Hour}, h)
		job, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k", Delay: time.Hour})
		if _, err := q.RetryNow(context.Background(), job.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("retry-now did not run the job")
		}
		waitStatus(t, q, job.ID, store.JobDone)
	})
}

func TestAPanickingHandlerIsRetriedNotFatal(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		var runs atomic.Int32
		h := newFuncHandler("k", func(context.Context, *Job) Outcome {
			if runs.Add(1) == 1 {
				panic("boom")
			}
			return Done()
		})
		startRunner(t, q, RunnerOptions{BackoffBase: time.Millisecond}, h)
		job, _, _ := q.Enqueue(context.Background(), Spec{Kind: "k"})
		waitStatus(t, q, job.ID, store.JobDone)
		if runs.Load() != 2 {
			t.Errorf("ran %d times, want 2", runs.Load())
		}
	})
}

func TestNewRunnerRefusesDuplicateKinds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		noop := func(context.Context, *Job) Outcome { return Done() }
		_, err := NewRunner(q, []Handler{newFuncHandler("k", noop), newFuncHandler("k", noop)}, RunnerOptions{})
		if err == nil || !strings.Contains(err.Error(), `"k"`) {
			t.Fatalf("got %v, want an error naming kind k", err)
		}
	})
}

// A runner says which kinds it handles: what an operator's page compares
// the queue's kinds with, to find the jobs nobody here runs.
func TestARunnerListsTheKindsItHandlesSorted(t *testing.T) {
	q := NewQueue(openDB(t, ""), nil)
	noop := func(context.Context, *Job) Outcome { return Done() }
	r, err := NewRunner(q, []Handler{newFuncHandler("relay_issue", noop), newFuncHandler("crl_regenerate", noop)}, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := r.Kinds()
	if !slices.Equal(kinds, []string{"crl_regenerate", "relay_issue"}) {
		t.Fatalf("kinds %v; want crl_regenerate, relay_issue", kinds)
	}
	kinds[0] = "changed"
	if r.Kinds()[0] != "crl_regenerate" {
		t.Error("changing the list Kinds returned changed the runner's")
	}
}

func TestSweepPrunesSettledJobsPastRetention(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		clk := clocktest.New(start)
		q := NewQueue(openDB(t, ""), clk)
		h := newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() })
		sweep := NewSweep(q, 24*time.Hour, time.Hour)
		r := startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: time.Hour}, h, sweep)

		old, _, _ := q.Enqueue(ctx, Spec{Kind: "k"})
		waitStatus(t, q, old.ID, store.JobDone)
		for clk.Now().Before(start.Add(26 * time.Hour)) {
			waitFor(t, "runner idle", func() bool { return r.Running() == 0 })
			at, err := clk.NextTimer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clk.Set(at)
		}
		waitFor(t, "old job pruned", func() bool {
			_, err := q.Get(ctx, old.ID)
			return errors.Is(err, store.ErrNotFound)
		})
		sweeps, _ := q.List(ctx, store.JobFilter{Kind: SweepKind})
		if len(sweeps) != 1 || sweeps[0].Status == store.JobFailed {
			t.Fatalf("sweep rows: %+v; want one live periodic row", sweeps)
		}
	})
}

// A job made due in another instance (another store, another pool) —
// enqueued there, or run now by an operator there while it waited its
// backoff — wakes this instance's PostgreSQL runner at once: its
// hour-long poll on a fake clock never fires, so only the database's
// announcement can start the job. SQLite has no such signal; its runners
// poll.
func TestAJobMadeDueInAnotherInstanceWakesThePostgresRunnerWithoutAPoll(t *testing.T) {
	for _, c := range []struct {
		name string
		// waiting enqueues, before the runner starts, what due makes due.
		waiting func(ctx context.Context, other *Queue) (int64, error)
		due     func(ctx context.Context, other *Queue, id int64) error
	}{
		{"an enqueue", func(context.Context, *Queue) (int64, error) { return 0, nil },
			func(ctx context.Context, other *Queue, _ int64) error {
				_, _, err := other.Enqueue(ctx, Spec{Kind: "k"})
				return err
			}},
		{"an operator's retry-now of a job waiting its backoff", func(ctx context.Context, other *Queue) (int64, error) {
			j, _, err := other.Enqueue(ctx, Spec{Kind: "k", RunAt: start.Add(2 * time.Hour)})
			return j.ID, err
		}, func(ctx context.Context, other *Queue, id int64) error {
			_, err := other.RetryNow(ctx, id)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Run("postgres", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				place := newPlace(t)
				clk := clocktest.New(start)
				q := NewQueue(openDB(t, place), clk)
				other := NewQueue(openDB(t, place), clk)
				id, err := c.waiting(ctx, other)
				if err != nil {
					t.Fatal(err)
				}
				ran := make(chan struct{}, 1)
				h := newFuncHandler("k", func(context.Context, *Job) Outcome { ran <- struct{}{}; return Done() })
				startRunner(t, q, RunnerOptions{Clock: clk, PollInterval: time.Hour}, h)

				// The runner listens, and has looked for work after it began to.
				waitFor(t, "the runner to listen for jobs", listeningAt(ctx, t, place))
				if at, err := clk.NextTimer(ctx); err != nil || !at.Equal(start.Add(time.Hour)) {
					t.Fatalf("the idle runner sleeps until %v (%v), want its hour-long poll", at, err)
				}

				if err := c.due(ctx, other, id); err != nil {
					t.Fatal(err)
				}
				select {
				case <-ran:
				case <-time.After(5 * time.Second):
					t.Fatal("the job made due in another instance did not start")
				}
			})
		})
	}
}

// A periodic row is the housekeeping itself: cancelled, it would stop on
// every instance until the next start. An operator may run it now, not
// cancel it.
func TestOperatorCancelOfAPeriodicJobIsRefusedAndItStaysScheduled(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		q := NewQueue(openDB(t, ""), nil)
		p := &Periodic{Name: "refresh", Every: time.Hour, Do: func(context.Context) error { return nil }}
		if err := p.Recover(ctx, q); err != nil {
			t.Fatal(err)
		}
		js, err := q.List(ctx, store.JobFilter{Kind: "refresh"})
		if err != nil || len(js) != 1 {
			t.Fatalf("periodic rows: %+v %v; want one", js, err)
		}
		if _, err := q.Cancel(ctx, js[0].ID); !errors.Is(err, store.ErrWrongState) || !strings.Contains(err.Error(), "recurring") {
			t.Errorf("cancelling the periodic row: %v; want ErrWrongState saying it recurs", err)
		}
		if got, _ := q.Get(ctx, js[0].ID); got.Status != store.JobReady || got.CancelRequested {
			t.Errorf("after the refused cancel the row is %s (cancel requested %v); want ready", got.Status, got.CancelRequested)
		}
		if _, err := q.RetryNow(ctx, js[0].ID); err != nil {
			t.Errorf("running the periodic row now: %v", err)
		}
	})
}
