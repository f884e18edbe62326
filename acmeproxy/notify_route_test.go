package acmeproxy

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// An operator may deactivate an account through any instance of a fleet,
// one whose config lacks the account's profile too: the deactivation is
// notified all the same, to the destinations the profile's config gives
// it where the profile is mounted — the only place they are known.
func TestAnOperatorsDeactivationWhereTheProfileIsNotMountedIsNotifiedWhereItIs(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hook := newHookReceiver(t, "hook-secret")
		e := notifyingEnv(t, envOptions{profileHandlers: func(p authority.Profiles) []jobs.Handler {
			return []jobs.Handler{authority.NotifyRouteJobs(p)}
		}}, true, notify.Destination{Type: notify.TypeWebhook, URL: hook.url, Secret: hook.secret})
		id := filepath.Base(string(e.client(ctx).KID))
		hook.await(vocab.EventAccountCreated, nil)

		// The admin API of an instance that mounts no profile, on the
		// same database.
		elsewhere := &operator.Operator{DB: e.db, Queue: e.queue, Profiles: staticProfiles{}}
		if _, err := elsewhere.DeactivateAccount(ctx, id, authority.Actor{Kind: authority.ActorAdmin, ID: "ops"}); err != nil {
			t.Fatal(err)
		}
		ev := hook.await(vocab.EventAccountDeactivated, func(ev notify.Event) bool { return ev.Account == id })
		if ev.Profile != e.srv.Profile() || ev.Time.IsZero() {
			t.Errorf("account_deactivated %+v; want it of profile %s, with its time", ev, e.srv.Profile())
		}
		if n := hook.count(vocab.EventAccountDeactivated); n != 1 {
			t.Errorf("%d deliveries of account_deactivated, want 1", n)
		}
	})
}
