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
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An operator's change and its audit row are one write: while the audit
// trail cannot be written (the database went away between the two, as far
// as the change is concerned), the change is refused and nothing changed;
// once it can, the change lands with its one row. Written apart, a crash,
// a lost connection or a deadline between the two left a retried or
// cancelled job, a minted or revoked EAB key, that no audit row says who
// changed.
func TestAnOperatorsChangeIsNeverRecordedWithoutItsAuditRow(t *testing.T) {
	actor := authority.Actor{Kind: authority.ActorCLI, ID: "alice"}
	// Each case prepares a change: act makes it, changed says whether
	// it landed.
	tests := []struct {
		name    string
		event   string
		prepare func(t *testing.T, ctx context.Context, e *testEnv, op *operator.Operator) (act func() error, changed func() bool)
	}{
		{"a job cancelled", vocab.EventJobCancelled, func(t *testing.T, ctx context.Context, e *testEnv, op *operator.Operator) (func() error, func() bool) {
			j := waitingJob(t, ctx, e)
			return func() error { _, err := op.CancelJobAs(ctx, j.ID, actor); return err },
				func() bool { return jobStatus(t, ctx, e, j.ID) == store.JobCancelled }
		}},
		{"a job retried", vocab.EventJobRetried, func(t *testing.T, ctx context.Context, e *testEnv, op *operator.Operator) (func() error, func() bool) {
			j := waitingJob(t, ctx, e)
			if _, err := e.queue.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			return func() error { _, err := op.RetryJobAs(ctx, j.ID, actor); return err },
				func() bool { return jobStatus(t, ctx, e, j.ID) != store.JobCancelled }
		}},
		{"an EAB key minted", vocab.EventEABKeyCreated, func(t *testing.T, ctx context.Context, e *testEnv, op *operator.Operator) (func() error, func() bool) {
			return func() error { _, err := op.CreateEABKey(ctx, e.srv.Profile(), "team-a", false, 0, actor); return err },
				func() bool { return len(eabKeys(t, ctx, op, e)) > 0 }
		}},
		{"an EAB key revoked", vocab.EventEABKeyRevoked, func(t *testing.T, ctx context.Context, e *testEnv, op *operator.Operator) (func() error, func() bool) {
			k, err := op.CreateEABKey(ctx, e.srv.Profile(), "team-a", false, 0, actor)
			if err != nil {
				t.Fatal(err)
			}
			return func() error { _, err := op.RevokeEABKey(ctx, k.KID, actor); return err },
				func() bool { ks := eabKeys(t, ctx, op, e); return len(ks) == 1 && ks[0].State == store.EABRevoked }
		}},
		{"a CRL regenerated", vocab.EventCRLRegenerated, func(t *testing.T, ctx context.Context, e *testEnv, op *operator.Operator) (func() error, func() bool) {
			// The runner's CRL refresh publishes CRLs of its own, which
			// are no operator's change: stopped, it publishes none.
			if err := e.runner.Stop(); err != nil {
				t.Fatal(err)
			}
			number := func() int64 { return crlNumber(t, ctx, e) }
			before := number()
			return func() error { _, err := op.RegenerateCRL(ctx, e.srv.Profile(), actor); return err },
				func() bool { return number() > before }
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx := context.Background()
				place := newPlace(t)
				e := newTestEnvWith(t, envOptions{dbPath: place, mutate: func(c *ProfileConfig) { c.EAB = authority.EABOptional }})
				op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
				act, changed := tc.prepare(t, ctx, e, op)
				rows := func() int { return len(auditRows(t, e.db, store.AuditFilter{Event: tc.event})) }

				end := auditOutage(t, place)
				err := act()
				if err == nil || changed() || rows() != 0 {
					t.Errorf("while no audit row can be written: err %v, changed %v, %d %s rows; want an error, no change and no row",
						err, changed(), rows(), tc.event)
				}
				end()

				if err := act(); err != nil {
					t.Fatalf("once audit rows can be written again: %v", err)
				}
				if !changed() || rows() != 1 {
					t.Errorf("once audit rows can be written again: changed %v, %d %s rows; want the change with one row", changed(), rows(), tc.event)
				}
			})
		})
	}
}

// waitingJob is a signer's job of the env's profile, waiting an hour.
func waitingJob(t *testing.T, ctx context.Context, e *testEnv) jobs.Job {
	t.Helper()
	j, _, err := e.queue.Enqueue(ctx, jobs.Spec{Kind: "script_issue", Key: "order1", Delay: time.Hour,
		Payload: map[string]string{"profile": e.srv.Profile(), "order": "order1"}})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func jobStatus(t *testing.T, ctx context.Context, e *testEnv, id int64) store.JobStatus {
	t.Helper()
	j, err := e.queue.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return j.Status
}

func eabKeys(t *testing.T, ctx context.Context, op *operator.Operator, e *testEnv) []operator.EABKeyView {
	t.Helper()
	p, err := op.ListEABKeys(ctx, store.EABKeyFilter{Profile: e.srv.Profile()})
	if err != nil {
		t.Fatal(err)
	}
	return p.Items
}

// crlNumber is the number of the CRL stored for the CA the env's profile
// issues from now; 0 for none.
func crlNumber(t *testing.T, ctx context.Context, e *testEnv) int64 {
	t.Helper()
	iss, err := e.srv.Authority().CurrentIssuer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.db.CRLNumber(ctx, iss.KeyID)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An operator's CRL regeneration (the admin API's crl/{profile}/regenerate,
// the CLI's crl regenerate) is an operator's change like the others: its
// audit row says who asked, for which profile, and which CRL it published.
// A CRL rebuilt on its own (a crl_regenerate job, queued here by the CRL
// refresh as after a revocation) gets no row: the README promises rows
// for an operator's regeneration only.
func TestAnOperatorsCRLRegenerationIsAuditedWithTheOperatorAndTheCRLItPublished(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		e := newTestEnv(t, nil)
		before := crlNumber(t, ctx, e)
		if err := authority.RefreshCRLs(ctx, []*authority.Authority{e.srv.Authority()}); err != nil {
			t.Fatal(err)
		}
		if before != 0 {
			t.Fatalf("CRL %d published before the refresh; want none, for the refresh to queue a rebuild", before)
		}
		for deadline := time.Now().Add(10 * time.Second); crlNumber(t, ctx, e) == before; {
			if time.Now().After(deadline) {
				t.Fatal("no CRL rebuilt by the crl_regenerate job within 10s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCRLRegenerated}); len(rows) != 0 {
			t.Errorf("a CRL rebuilt by a job wrote %+v; want no row", rows)
		}
		op := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{e.srv.Profile(): e.srv}}
		actor := authority.Actor{Kind: authority.ActorCLI, ID: "alice"}
		v, err := op.RegenerateCRL(ctx, e.srv.Profile(), actor)
		if err != nil {
			t.Fatal(err)
		}
		rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventCRLRegenerated})
		if len(rows) != 1 {
			t.Fatalf("%d %s rows; want 1", len(rows), vocab.EventCRLRegenerated)
		}
		r := rows[0]
		if r.ActorKind != actor.Kind || r.ActorID != actor.ID || r.Profile != e.srv.Profile() || r.Outcome != authority.OutcomeSuccess {
			t.Errorf("the row: actor %s/%s, profile %q, outcome %s; want %s/%s, %q, %s",
				r.ActorKind, r.ActorID, r.Profile, r.Outcome, actor.Kind, actor.ID, e.srv.Profile(), authority.OutcomeSuccess)
		}
		if want := fmt.Sprintf("CRL %d ", v.Number); !strings.Contains(r.Detail, want) || !strings.Contains(r.Detail, v.Issuer) {
			t.Errorf("the row's detail %q does not name the CRL published, %q of CA %s", r.Detail, want, v.Issuer)
		}
	})
}
