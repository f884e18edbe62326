package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// NextAttempt tells a due job from a settled or missing one: a caller
// telling a client how long to wait answers the first "soon" and the
// second "not until someone queues the work again".
func TestNextAttemptTellsADueJobFromNoLiveJob(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const owner = "test"
		claim := func(t *testing.T, db *store.DB, now time.Time) int64 {
			t.Helper()
			js, err := db.ClaimJobsIn(context.Background(), "k", []string{""}, owner, now, now.Add(time.Hour), 1)
			if err != nil || len(js) != 1 {
				t.Fatalf("claim: %v %d", err, len(js))
			}
			return js[0].ID
		}
		tests := []struct {
			name     string
			then     func(t *testing.T, db *store.DB, clk *clocktest.Fake)
			want     Next
			wantWait time.Duration
			wantErr  bool
		}{
			{name: "a job ready now is due", want: NextDue},
			{name: "a claimed job is running", want: NextRunning,
				then: func(t *testing.T, db *store.DB, clk *clocktest.Fake) { claim(t, db, clk.Now()) }},
			{name: "a job backing off is waiting until its next attempt", want: NextWaiting, wantWait: 3 * time.Minute,
				then: func(t *testing.T, db *store.DB, clk *clocktest.Fake) {
					id := claim(t, db, clk.Now())
					if _, err := db.RetryJob(context.Background(), id, owner, clk.Now().Add(5*time.Minute), "down", false, clk.Now()); err != nil {
						t.Fatal(err)
					}
					clk.Advance(2 * time.Minute)
				}},
			{name: "a settled job leaves none live", want: NextNone,
				then: func(t *testing.T, db *store.DB, clk *clocktest.Fake) {
					if _, err := db.CompleteJob(context.Background(), claim(t, db, clk.Now()), owner, clk.Now()); err != nil {
						t.Fatal(err)
					}
				}},
			{name: "a store that does not answer is an error", wantErr: true,
				then: func(t *testing.T, db *store.DB, _ *clocktest.Fake) {
					if err := db.Close(); err != nil {
						t.Fatal(err)
					}
				}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				clk := clocktest.New(start)
				db := openDB(t, "")
				q := NewQueue(db, clk)
				if _, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", Key: "order-1"}); err != nil {
					t.Fatal(err)
				}
				if tc.then != nil {
					tc.then(t, db, clk)
				}
				wait, next, err := q.NextAttempt(context.Background(), "k", "order-1", clk.Now())
				if (err != nil) != tc.wantErr || next != tc.want || wait != tc.wantWait {
					t.Errorf("NextAttempt: %s, %d, %v; want %s, %d, error %v", wait, next, err, tc.wantWait, tc.want, tc.wantErr)
				}
			})
		}
		t.Run("no job of the kind and key is none live", func(t *testing.T) {
			q := NewQueue(openDB(t, ""), clocktest.New(start))
			if wait, next, err := q.NextAttempt(context.Background(), "k", "no-such-key", start); err != nil || next != NextNone || wait != 0 {
				t.Errorf("NextAttempt: %s, %d, %v; want none", wait, next, err)
			}
		})
	})
}
