package operator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A job an operator cancelled while it waited is cancelled at once, but
// its Abandon (failing the order it worked for) is owed to a runner of
// its kind: its view says so, in the list and on its own, until a runner
// has given it up.
func TestAJobsViewSaysItsAbandonIsOwedUntilARunnerGivesItUp(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	clk := clocktest.New(time.Now())
	q := jobs.NewQueue(db, clk)
	op := &Operator{DB: db, Queue: q, Profiles: noProfiles{}, Clock: clk}
	enqueue := func(kind string) int64 {
		j, _, err := q.Enqueue(ctx, jobs.Spec{Kind: kind, Key: "o1", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	waiting := enqueue("waiting_kind")
	owed := enqueue("signer_issue")
	if _, err := op.CancelJob(ctx, owed); err != nil {
		t.Fatal(err)
	}
	given := enqueue("given_up_kind")
	if _, err := op.CancelJob(ctx, given); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.ClaimJobs(ctx, "given_up_kind", "runner", clk.Now(), clk.Now().Add(time.Minute), 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claiming the abandon: %+v %v", claimed, err)
	}
	if err := db.SettleJobAbandon(ctx, given, "runner", clk.Now()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		id         int64
		wantOwed   bool
		wantStatus string
	}{
		{"ok/a job cancelled while waiting owes its abandon", owed, true, "cancelled — abandon pending on a runner of signer_issue"},
		{"ok/a cancelled job a runner gave up owes nothing", given, false, "cancelled"},
		{"ok/a waiting job owes nothing", waiting, false, "ready"},
	}
	list, err := op.ListJobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shown, err := op.ShowJob(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(list.Items, func(v JobView) bool { return v.ID == tc.id })
			if i < 0 {
				t.Fatalf("job %d is not listed", tc.id)
			}
			for where, v := range map[string]JobView{"shown": shown, "listed": list.Items[i]} {
				if v.AbandonOwed != tc.wantOwed || v.StatusText() != tc.wantStatus {
					t.Errorf("%s: abandon owed %v, status %q; want %v, %q", where, v.AbandonOwed, v.StatusText(), tc.wantOwed, tc.wantStatus)
				}
			}
		})
	}
}

// A cancelled job owing its Abandon, of a kind no runner of this process
// handles (a signer_issue cancelled on a front end with no worker), keeps
// its order processing until another instance gives it up: the overview
// counts these by kind, only when it knows the runner's kinds.
func TestTheOverviewCountsTheOwedAbandonsOfKindsThisProcessDoesNotRun(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	clk := clocktest.New(time.Now())
	q := jobs.NewQueue(db, clk)
	for _, s := range []jobs.Spec{
		{Kind: "signer_issue", Key: "o1"}, {Kind: "signer_issue", Key: "o2"}, {Kind: "signer_revoke", Key: "o3"},
		{Kind: "notify_deliver", Key: "n1"},
	} {
		j, _, err := q.Enqueue(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Cancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Waiting, not cancelled: the ready jobs' line counts it, not this one.
	if _, _, err := q.Enqueue(ctx, jobs.Spec{Kind: "signer_issue", Key: "o4"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() []string
		want []KindCount
	}{
		{"ok/the kinds the runner lacks, by kind", func() []string { return []string{"notify_deliver"} },
			[]KindCount{{"signer_issue", 2}, {"signer_revoke", 1}}},
		{"ok/none when the runner runs every kind owed", func() []string {
			return []string{"notify_deliver", "signer_issue", "signer_revoke"}
		}, nil},
		{"ok/none when the runner's kinds are not known", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := &Operator{DB: db, Queue: q, Profiles: noProfiles{}, Clock: clk, RunKinds: tc.run}
			ov, err := op.Overview(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ov.UnrunAbandons, tc.want) {
				t.Errorf("owed abandons %+v; want %+v", ov.UnrunAbandons, tc.want)
			}
		})
	}
}
