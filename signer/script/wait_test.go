package script

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

func TestTheExpectedWaitIsUntilTheJobsNextAttemptOrShortWhileOneRunsOrIdleWithoutOne(t *testing.T) {
	const owner = "test"
	claim := func(t *testing.T, b *bench) int64 {
		t.Helper()
		now := b.clock.Now()
		js, err := b.db.ClaimJobsIn(context.Background(), IssueKind, []string{signer.SigningLane("p")}, owner, now, now.Add(time.Hour), 1)
		if err != nil || len(js) != 1 {
			t.Fatalf("claim: %v %d", err, len(js))
		}
		return js[0].ID
	}
	// retryIn settles a claimed job's attempt as an exit 75 would: its
	// next attempt in d.
	retryIn := func(t *testing.T, b *bench, d time.Duration) {
		t.Helper()
		id, now := claim(t, b), b.clock.Now()
		if _, err := b.db.RetryJob(context.Background(), id, owner, now.Add(d), "exit 75", true, now); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		// then brings the order's job to the state under test; the
		// order's job is queued and due.
		then func(t *testing.T, b *bench)
		want signer.Wait
	}{
		{name: "a job due now has no estimate", then: func(*testing.T, *bench) {}},
		{name: "while an attempt runs the program the wait is short", want: signer.Wait{For: time.Second, Known: true},
			then: func(t *testing.T, b *bench) { claim(t, b) }},
		{name: "after an exit 75 the wait is until the next attempt", want: signer.Wait{For: 15 * time.Second, Known: true},
			then: func(t *testing.T, b *bench) { retryIn(t, b, 15*time.Second) }},
		{name: "a long backoff counts down", want: signer.Wait{For: 6 * time.Minute, Known: true},
			then: func(t *testing.T, b *bench) { retryIn(t, b, 10*time.Minute); b.clock.Advance(4 * time.Minute) }},
		{name: "a job past its next attempt has no estimate",
			then: func(t *testing.T, b *bench) { retryIn(t, b, 15*time.Second); b.clock.Advance(time.Minute) }},
		{name: "a settled job leaves the signer idle", want: signer.Wait{Idle: true}, then: func(t *testing.T, b *bench) {
			if _, err := b.db.CompleteJob(context.Background(), claim(t, b), owner, b.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a store that does not answer gives no estimate and is not idle", then: func(t *testing.T, b *bench) {
			if err := b.db.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			// A clock on whole milliseconds, as the store keeps times.
			b := newBench(t, Options{Command: []string{"/bin/true"}})
			b.clock.Set(b.clock.Now().Truncate(time.Millisecond).Add(time.Millisecond))
			req, _ := b.finalized(t, "wait.example.com")
			if _, err := b.s.Issue(ctx, req); err != nil {
				t.Fatal(err)
			}
			tt.then(t, b)
			if got := b.s.ExpectedWait(ctx, req.OrderID); got != tt.want {
				t.Errorf("expected wait %+v; want %+v", got, tt.want)
			}
		})
	}
	t.Run("an order without a job leaves the signer idle", func(t *testing.T) {
		b := newBench(t, Options{Command: []string{"/bin/true"}})
		if got := b.s.ExpectedWait(context.Background(), "no-such-order"); got != (signer.Wait{Idle: true}) {
			t.Errorf("expected wait %+v; want idle", got)
		}
	})
}
