package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A validation job retired on an instance whose config lacks its
// profile — its deadline passed there, or an operator cancelled it
// through that instance — makes the challenge, its authorization and its
// order invalid as a retirement where the profile is mounted does: one
// challenge_failed row, written with the challenge's failure, and its
// notification delivered where the profile is mounted, the only place its
// destinations are known.
func TestAValidationRetiredWhereItsProfileIsNotMountedIsAuditedAndNotifiedWhereItIs(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hook := newHookReceiver(t, "hook-secret")
		v := &faultingDNS01{faults: 1 << 30}
		e := notifyingEnv(t, envOptions{
			opts: func(o *Options) {
				v.Validator = o.Validator
				o.Validator = v
			},
			// The validation job waits for its next attempt.
			runner: jobs.RunnerOptions{BackoffBase: time.Hour, BackoffCap: time.Hour},
			profileHandlers: func(p authority.Profiles) []jobs.Handler {
				return []jobs.Handler{authority.NotifyRouteJobs(p)}
			},
		}, true, notify.Destination{Type: notify.TypeWebhook, URL: hook.url, Secret: hook.secret})
		alice := e.rawClient()
		alice.register()
		acct := path.Base(alice.kid)
		o := alice.order(dnsID("retired.example.com"))
		order := path.Base(o.url)
		ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
		if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status != http.StatusOK {
			t.Fatalf("challenge POST: %d %s", r.status, r.body)
		}
		live, err := e.queue.List(ctx, store.JobFilter{Kind: authority.ValidateKind, Key: path.Base(ch.URL)})
		if err != nil || len(live) != 1 {
			t.Fatalf("the challenge's validation jobs: %+v, %v; want one", live, err)
		}

		// Retired by an instance that mounts no profile.
		elsewhere := authority.ValidationJobs(staticProfiles{}, e.db, clock.Real())
		if err := elsewhere.Abandon(ctx, &live[0], "cancelled by an operator"); err != nil {
			t.Fatal(err)
		}
		alice.await(ch.URL, "invalid")

		rows := auditRows(t, e.db, store.AuditFilter{Event: acme.EventChallengeFailed})
		if len(rows) != 1 {
			t.Fatalf("%d challenge_failed rows, want 1: %+v", len(rows), rows)
		}
		if row := rows[0]; row.Profile != e.srv.Profile() || row.Reason != string(acme.ErrorServerInternal) || row.ActorID != acct ||
			row.AccountID != acct || row.OrderID != order || len(row.Identifiers) != 1 || row.Identifiers[0].Value != "retired.example.com" {
			t.Errorf("challenge_failed row %+v; want reason serverInternal, of profile %s, by and of account %s, in order %s, naming retired.example.com",
				row, e.srv.Profile(), acct, order)
		}
		ev := hook.await(acme.EventChallengeFailed, func(ev notify.Event) bool { return ev.Order == order })
		if ev.Profile != e.srv.Profile() || ev.Account != acct || ev.Reason != string(acme.ErrorServerInternal) {
			t.Errorf("challenge_failed notification %+v; want it of profile %s and account %s, reason serverInternal", ev, e.srv.Profile(), acct)
		}
		if n := hook.count(acme.EventChallengeFailed); n != 1 {
			t.Errorf("%d deliveries of challenge_failed, want 1", n)
		}
	})
}
