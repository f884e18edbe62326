package operator

import (
	"context"
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
