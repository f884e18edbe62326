package operator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// noProfiles mounts no profile.
type noProfiles struct{}

func (noProfiles) Lookup(string) (*authority.Authority, bool) { return nil, false }
func (noProfiles) All() []*authority.Authority                { return nil }

// A job of a kind no runner of this process handles (a relay job left
// after its profile was removed from the config) waits for ever: the
// overview counts the ready ones by kind, and only when it knows the
// runner's kinds.
func TestTheOverviewCountsTheReadyJobsOfKindsThisProcessDoesNotRun(t *testing.T) {
	ctx := context.Background()
	db := openTestStore(t)
	clk := clocktest.New(time.Now())
	q := jobs.NewQueue(db, clk)
	for _, s := range []jobs.Spec{
		{Kind: "relay_issue", Key: "o1"}, {Kind: "relay_issue", Key: "o2"}, {Kind: "script_issue", Key: "o3", Delay: time.Hour},
		{Kind: "notify_deliver", Key: "n1"}, {Kind: "gone_kind", Key: "g1"},
	} {
		if _, _, err := q.Enqueue(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// A settled job of an unrun kind waits for nothing.
	gone, err := q.Live(ctx, "gone_kind", "g1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func() []string
		want []KindCount
	}{
		{"ok/the kinds the runner lacks, by kind", func() []string { return []string{"notify_deliver"} },
			[]KindCount{{"relay_issue", 2}, {"script_issue", 1}}},
		{"ok/none when the runner runs every kind queued", func() []string {
			return []string{"gone_kind", "notify_deliver", "relay_issue", "script_issue"}
		}, nil},
		{"ok/none when the runner's kinds are not known", nil, nil},
		{"ok/none before the runner has started", func() []string { return nil }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := &Operator{DB: db, Queue: q, Profiles: noProfiles{}, Clock: clk, RunKinds: tc.run}
			ov, err := op.Overview(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ov.Unrun, tc.want) {
				t.Errorf("unrun %+v; want %+v", ov.Unrun, tc.want)
			}
		})
	}
}

// The overview's window of orders starts at a whole second, so that the
// orders list's since filter (an RFC 3339 time) reads the same window.
func TestTheOverviewsOrderWindowStartsAtAWholeSecond(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 987_654_321, time.UTC)
	op := &Operator{DB: openTestStore(t), Profiles: noProfiles{}, Clock: clocktest.New(now)}
	op.Queue = jobs.NewQueue(op.DB, op.Clock)
	ov, err := op.Overview(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 2, 28, 12, 0, 0, 0, time.UTC)
	if !ov.OrdersSince.Equal(want) {
		t.Errorf("orders since %s; want %s", ov.OrdersSince.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
}
