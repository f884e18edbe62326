package acmeproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// stopOnce is a context that ends (context.Canceled) once gone reports
// true — once a batch that deleted a given row committed — as a reload
// or a shutdown ends a sweep's job between two batches. Its Done never
// closes: nothing is cut off inside a batch.
type stopOnce struct {
	context.Context
	gone func() bool
}

func (c stopOnce) Err() error {
	if c.gone() {
		return context.Canceled
	}
	return c.Context.Err()
}

// A prune or sweep whose context ends part way (a reload or a shutdown
// stopping its job, the operator's request gone) has deleted the
// batches before and records them — as interrupted, saying it stopped
// part way, not as a prune that ran to the end: the operator reading
// the trail must not take the rows older than the cutoff for gone.
func TestAPruneStoppedPartWayIsAuditedAsInterrupted(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name string
		// run fills the store, then prunes or sweeps with a context
		// that ends after its first batch; event is its row's.
		run   func(t *testing.T, e *testEnv) (event string, err error)
		event string
	}{
		{name: "the audit sweep", event: vocab.EventAuditPruned, run: func(t *testing.T, e *testEnv) (string, error) {
			now := time.Now()
			gone := oldAuditRows(t, e, now.Add(-500*day), store.AuditPruneBatch+1)
			_, err := authority.SweepAudit(stopOnce{t.Context(), gone}, e.db, 400*day, now)
			return vocab.EventAuditPruned, err
		}},
		{name: "an operator's prune", event: vocab.EventAuditPruned, run: func(t *testing.T, e *testEnv) (string, error) {
			now := time.Now()
			gone := oldAuditRows(t, e, now.Add(-500*day), store.AuditPruneBatch+1)
			op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
			_, err := op.PruneAudit(stopOnce{t.Context(), gone}, now.Add(-day), authority.Actor{Kind: authority.ActorCLI, ID: "alice"})
			return vocab.EventAuditPruned, err
		}},
		{name: "the retention sweep", event: vocab.EventRetentionPruned, run: func(t *testing.T, e *testEnv) (string, error) {
			// A dead order (its phase first) and a deactivated account
			// without orders (the last phase, never reached).
			ctx := t.Context()
			gone := deadOrderAndEmptyAccount(t, e)
			_, err := authority.SweepRetention(stopOnce{ctx, gone}, e.db, authority.Retention{Orders: 30 * day, Certificates: 90 * day},
				time.Now().Add(400*day))
			return vocab.EventRetentionPruned, err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				e := newTestEnv(t, nil)
				event, err := tt.run(t, e)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("stopped after its first batch: %v; want context.Canceled", err)
				}
				rows := auditRows(t, e.db, store.AuditFilter{Event: event})
				if len(rows) != 1 {
					t.Fatalf("%d %s rows; want one: %+v", len(rows), event, rows)
				}
				if rows[0].Outcome != authority.OutcomeInterrupted || !strings.Contains(rows[0].Detail, "stopped part way") {
					t.Errorf("the row of a prune stopped part way: outcome %q, detail %q; want interrupted, saying it stopped part way",
						rows[0].Outcome, rows[0].Detail)
				}
			})
		})
	}
}

// oldAuditRows writes n audit rows from at on, a millisecond apart, and
// returns what reports the oldest deleted.
func oldAuditRows(t *testing.T, e *testEnv, at time.Time, n int) func() bool {
	t.Helper()
	for i := range n {
		if err := e.db.InsertAudit(t.Context(), store.AuditEvent{At: at.Add(time.Duration(i) * time.Millisecond),
			Event: vocab.EventCertificateIssued, Outcome: authority.OutcomeSuccess, OrderID: fmt.Sprint("old", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return func() bool {
		rows, err := e.db.SearchAudit(context.Background(), store.AuditFilter{OrderID: "old0"})
		if err != nil {
			t.Error(err)
		}
		return err == nil && len(rows) == 0
	}
}

// A prune whose process dies between two batches (here: its store is
// closed under it, so that it writes nothing more) has committed the
// batches before. What they deleted is audited all the same: the next
// audit sweep, on any instance, finds the prune unfinished and writes
// its row — interrupted, saying what it had deleted and that its
// process ended. One row per prune, however many batches it ran.
func TestAPruneKilledBetweenBatchesIsAuditedByTheNextSweep(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name   string
		event  string
		detail string
		// kill fills the store and runs the prune on killed, a store
		// of its own at the environment's place, which stop closes,
		// and returns the time the prune ran at (its clock's).
		kill func(t *testing.T, e *testEnv, killed *store.DB, stop func()) (ranAt time.Time)
	}{
		{name: "the audit sweep", event: vocab.EventAuditPruned, detail: "the retention sweep deleted 500 audit rows",
			kill: func(t *testing.T, e *testEnv, killed *store.DB, stop func()) time.Time {
				now := time.Now()
				gone := oldAuditRows(t, e, now.Add(-500*day), store.AuditPruneBatch+1)
				_, _ = authority.SweepAudit(stopOnce{t.Context(), func() bool { return gone() && stopped(stop) }}, killed, 400*day, now)
				return now
			}},
		{name: "an operator's prune", event: vocab.EventAuditPruned, detail: "deleted 500 audit rows",
			kill: func(t *testing.T, e *testEnv, killed *store.DB, stop func()) time.Time {
				now := time.Now()
				gone := oldAuditRows(t, e, now.Add(-500*day), store.AuditPruneBatch+1)
				op := &operator.Operator{DB: killed}
				_, _ = op.PruneAudit(stopOnce{t.Context(), func() bool { return gone() && stopped(stop) }}, now.Add(-day),
					authority.Actor{Kind: authority.ActorCLI, ID: "alice"})
				return now
			}},
		{name: "the retention sweep", event: vocab.EventRetentionPruned, detail: "the retention sweep deleted 1 orders",
			kill: func(t *testing.T, e *testEnv, killed *store.DB, stop func()) time.Time {
				ctx := t.Context()
				orderGone := deadOrderAndEmptyAccount(t, e)
				gone := func() bool { return orderGone() && stopped(stop) }
				now := time.Now().Add(400 * day)
				_, _ = authority.SweepRetention(stopOnce{ctx, gone}, killed, authority.Retention{Orders: 30 * day, Certificates: 90 * day}, now)
				return now
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				place := newPlace(t)
				e := newTestEnvWith(t, envOptions{dbPath: place})
				killed, err := dialectOf(t).openAt(t.Context(), place, store.SQLiteOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { killed.Close() })
				ranAt := tt.kill(t, e, killed, func() { killed.Close() })
				if rows := auditRows(t, e.db, store.AuditFilter{Event: tt.event}); len(rows) != 0 {
					t.Fatalf("the killed prune wrote %+v; want nothing past its first batch", rows)
				}

				// The next audit sweep, an hour later, on the instance
				// still running.
				if _, err := authority.SweepAudit(t.Context(), e.db, 400*day, ranAt.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
				rows := auditRows(t, e.db, store.AuditFilter{Event: tt.event, Outcome: authority.OutcomeInterrupted})
				if len(rows) != 1 || !strings.HasPrefix(rows[0].Detail, tt.detail) || !strings.Contains(rows[0].Detail, "process ended") {
					t.Fatalf("the killed prune's rows after the next sweep: %+v; want one, %q…, saying its process ended", rows, tt.detail)
				}
				// Found once: a later sweep writes it no more.
				if _, err := authority.SweepAudit(t.Context(), e.db, 400*day, ranAt.Add(2*time.Hour)); err != nil {
					t.Fatal(err)
				}
				if again := auditRows(t, e.db, store.AuditFilter{Event: tt.event, Outcome: authority.OutcomeInterrupted}); len(again) != 1 {
					t.Errorf("%d rows of the killed prune after a second sweep; want 1", len(again))
				}
			})
		})
	}
}

// stopped runs stop once it is asked, and says so: the process ending.
func stopped(stop func()) bool {
	stop()
	return true
}

// deadOrderAndEmptyAccount stores what the retention sweep deletes in its
// first phase and its last: a failed order and a deactivated account
// without orders. gone reports whether the order was deleted.
func deadOrderAndEmptyAccount(t *testing.T, e *testEnv) (gone func() bool) {
	t.Helper()
	ctx := t.Context()
	au := e.srv.Authority()
	acct, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: "k1", KeyJWK: []byte(`{}`)}, authority.Client{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := au.CreateOrder(ctx, acct.ID, []vocab.Identifier{{Type: vocab.IdentifierDNS, Value: "a.example.com"}}, []bool{false},
		time.Time{}, time.Time{}, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.FailOrder(ctx, o.ID, nil, "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	empty, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: "k2", KeyJWK: []byte(`{}`)}, authority.Client{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.DeactivateAccount(ctx, empty.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	return func() bool {
		_, err := e.db.GetOrder(context.Background(), e.srv.Profile(), o.ID)
		return errors.Is(err, store.ErrNotFound)
	}
}
