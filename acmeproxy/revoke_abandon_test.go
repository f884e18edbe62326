package acmeproxy

import (
	"context"
	"crypto/x509"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// auditOutage makes every write of an audit row at place fail, as it does
// while the database is away, until the returned function ends it.
func auditOutage(t *testing.T, place string) (end func()) {
	t.Helper()
	driver, dsn := "sqlite", "file:"+place+"?_pragma=busy_timeout(5000)"
	begin := []string{`CREATE TRIGGER audit_outage BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'the database is away'); END`}
	finish := []string{`DROP TRIGGER audit_outage`}
	if dialectOf(t).name == "postgres" {
		driver, dsn = "pgx", place
		begin = []string{
			`CREATE FUNCTION audit_outage() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the database is away'; END $$`,
			`CREATE TRIGGER audit_outage BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION audit_outage()`,
		}
		finish = []string{`DROP TRIGGER audit_outage ON audit_events`, `DROP FUNCTION audit_outage()`}
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exec := func(stmts []string) {
		for _, s := range stmts {
			if _, err := db.Exec(s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	}
	exec(begin)
	var once sync.Once
	return func() { once.Do(func() { exec(finish) }) }
}

// refusingAtOutage issues as the local CA and revokes at a backend, by
// job, which refuses every revocation; the first refusal also starts,
// by start, an outage of the database, so that the job is abandoned
// while it lasts.
type refusingAtOutage struct {
	*localca.Signer
	once  sync.Once
	start func()
}

func (r *refusingAtOutage) Revoke(context.Context, *x509.Certificate, *int) error {
	r.once.Do(r.start)
	return fmt.Errorf("the CA says: not this account's certificate: %w", signer.ErrRevocationRefused)
}

func (r *refusingAtOutage) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

// revocationFailedRows counts the revocation_failed rows of an order.
func revocationFailedRows(t *testing.T, db *store.DB, order string) int {
	t.Helper()
	return len(auditRows(t, db, store.AuditFilter{Event: vocab.EventRevocationFailed, OrderID: order}))
}

// A revocation abandoned while the database cannot take its
// revocation_failed row is not retired without it: the abandon is tried
// again, and once the database is back the row is written, once, and the
// job retired. Abandoned once and for all during the outage, the row was
// lost while the job's retirement itself waited the outage out.
func TestARevocationAbandonedDuringAnOutageIsAuditedOnceWhenTheDatabaseIsBack(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		place := newPlace(t)
		var end func()
		backend := &refusingAtOutage{start: func() { end = auditOutage(t, place) }}
		core, logs := observer.New(zap.WarnLevel)
		e := newTestEnvWith(t, envOptions{
			dbPath: place,
			opts:   func(o *Options) { o.RevokeWait = 10 * time.Millisecond },
			wrap:   func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
			runner: jobs.RunnerOptions{Logger: zap.New(core)},
		})
		c := e.client(ctx)
		cert := e.issue(ctx, c, "abandoned-in-outage.example.com")
		e.raw(c).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 4}, jwsOpts{})

		js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind, Key: cert.order})
		if err != nil || len(js) != 1 {
			t.Fatalf("signer_revoke jobs: %+v (%v); want one", js, err)
		}
		job := js[0]
		retired := func() bool {
			j, err := e.queue.Get(ctx, job.ID)
			return err == nil && j.Status == store.JobFailed
		}
		waitUntil(t, "the abandon to fail in the outage, or the job to be retired", func() bool {
			return logs.FilterField(zap.String("event", "jobs_abandon_retrying")).Len() > 0 || retired()
		})
		if retired() {
			t.Errorf("the job was retired during the outage, with %d revocation_failed rows; want it running until its abandon is recorded",
				revocationFailedRows(t, e.db, cert.order))
		}
		end()

		waitUntil(t, "the job retired", retired)
		if n := revocationFailedRows(t, e.db, cert.order); n != 1 {
			t.Errorf("%d revocation_failed rows once the database is back; want 1", n)
		}
	})
}

// A runner that crashed after a revocation's abandon wrote its
// revocation_failed row, and before the job's retirement was recorded,
// left the job running under a lease that lapses. The runner that
// reclaims it runs it again, sees it fail again and abandons it again:
// the trail still has one row for that one failed revocation.
func TestARevocationAbandonedAgainAfterACrashIsAuditedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		backend := &refusingBackend{}
		e := newTestEnvWith(t, envOptions{
			opts: func(o *Options) { o.RevokeWait = 10 * time.Millisecond },
			wrap: func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
			// The environment's runner leaves the revocation to the
			// crashed one and the one after it.
			runner: jobs.RunnerOptions{Lanes: []string{}},
		})
		c := e.client(ctx)
		cert := e.issue(ctx, c, "abandoned-twice.example.com")
		e.raw(c).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 4}, jwsOpts{})

		profiles := staticProfiles{e.srv.Profile(): e.srv}
		var revoke jobs.Handler
		for _, h := range authority.RevocationJobHandlers(profiles, profiles.All, e.db, e.srv.clock, nil) {
			if h.Kind() == authority.RevokeKind {
				revoke = h
			}
		}
		// The crashed runner: it claimed the job, which failed, and
		// abandoned it; its lease lapses unrenewed.
		now := time.Now()
		claimed, err := e.db.ClaimJobsIn(ctx, authority.RevokeKind, signingLanes(e.srv), "crashed", now, now, 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("the crashed runner's claim: %+v %v", claimed, err)
		}
		if err := revoke.Abandon(ctx, &claimed[0], "the CA said no"); err != nil {
			t.Fatal(err)
		}
		if n := revocationFailedRows(t, e.db, cert.order); n != 1 {
			t.Fatalf("%d revocation_failed rows after the first abandon; want 1", n)
		}

		// The next runner reclaims it.
		r, err := jobs.NewRunner(jobs.NewQueue(e.db, nil), []jobs.Handler{revoke}, jobs.RunnerOptions{Lanes: signingLanes(e.srv)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Stop() })
		waitUntil(t, "the job retired", func() bool {
			j, err := e.queue.Get(ctx, claimed[0].ID)
			return err == nil && j.Status == store.JobFailed
		})
		if n := backend.asked.Load(); n != 1 {
			t.Errorf("the backend was asked %d times; want once, by the runner after the crash", n)
		}
		if n := revocationFailedRows(t, e.db, cert.order); n != 1 {
			t.Errorf("%d revocation_failed rows after the abandon ran again; want 1", n)
		}
	})
}

// A revocation retired on an instance that does not mount its profile —
// an operator cancels it there, on a front end or on an instance whose
// config dropped the profile — still leaves its revocation_failed row:
// what the row says is in the job's payload and the store. It is written
// once, however often the abandon runs. Written only where the profile
// was mounted, the trail lost the record that a revocation never reached
// its backend.
func TestARevocationRetiredWhereItsProfileIsNotMountedIsAuditedOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		backend := &refusingBackend{}
		e := newTestEnvWith(t, envOptions{
			opts: func(o *Options) { o.RevokeWait = 10 * time.Millisecond },
			wrap: func(l *localca.Signer) signer.Signer { backend.Signer = l; return backend },
			// The revocation waits in its profile's lane: no runner
			// here serves it.
			runner: jobs.RunnerOptions{Lanes: []string{}},
		})
		c := e.client(ctx)
		cert := e.issue(ctx, c, "retired-elsewhere.example.com")
		e.raw(c).post(e.url("/revoke-cert"), map[string]any{"certificate": b64(cert.der), "reason": 4}, jwsOpts{})
		js, err := e.queue.List(ctx, store.JobFilter{Kind: authority.RevokeKind, Key: cert.order})
		if err != nil || len(js) != 1 {
			t.Fatalf("signer_revoke jobs: %+v (%v); want one", js, err)
		}

		// The other instance: same store, no profile mounted.
		none := staticProfiles{}
		handlers := authority.RevocationJobHandlers(none, none.All, e.db, e.srv.clock, nil)
		var revoke jobs.Handler
		for _, h := range handlers {
			if h.Kind() == authority.RevokeKind {
				revoke = h
			}
		}
		q := jobs.NewQueue(e.db, nil)
		r, err := jobs.NewRunner(q, handlers, jobs.RunnerOptions{Lanes: []string{}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Stop() })
		job, err := q.Cancel(ctx, js[0].ID)
		if err != nil || job.Status != store.JobCancelled {
			t.Fatalf("cancel: %+v %v; want the job cancelled", job, err)
		}
		// Run again, as after a crash before the retirement was recorded.
		if err := revoke.Abandon(ctx, &job, "cancelled by an operator"); err != nil {
			t.Fatal(err)
		}

		rows := auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationFailed, OrderID: cert.order})
		if len(rows) != 1 {
			t.Fatalf("%d revocation_failed rows; want 1", len(rows))
		}
		stored, err := e.db.CertificateOfOrder(ctx, cert.order)
		if err != nil {
			t.Fatal(err)
		}
		got := rows[0]
		for _, f := range []struct{ name, got, want string }{
			{"outcome", got.Outcome, authority.OutcomeFailure},
			{"profile", got.Profile, e.srv.Profile()},
			{"serial", got.Serial, stored.Serial},
			{"reason", got.Reason, "4"},
			{"detail", got.Detail, "cancelled by an operator"},
			{"actor", got.ActorKind, authority.ActorAccount},
		} {
			if f.got != f.want {
				t.Errorf("the row's %s is %q; want %q", f.name, f.got, f.want)
			}
		}
	})
}
