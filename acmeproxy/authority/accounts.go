package authority

import (
	"context"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// CreateAccount stores a new account of the profile for a's key (RFC 8555
// §7.3), notified as created from clientIP; created is false when the key
// had an account already, which is returned instead.
func (au *Authority) CreateAccount(ctx context.Context, a store.Account, clientIP string) (acct store.Account, created bool, err error) {
	now := au.clock.Now()
	a.ID, a.Profile = store.NewID(), au.cfg.Profile
	jobs := au.notifyJobs(notify.Event{Event: acme.EventAccountCreated, Account: a.ID, ClientAddress: clientIP, Time: now})
	acct, created, err = au.db.CreateAccount(ctx, a, now, jobs...)
	if err != nil || !created {
		return acct, created, err
	}
	au.Notified(jobs)
	au.log.Info("account created", zap.String("event", acme.EventAccountCreated),
		zap.String("profile", au.cfg.Profile), zap.String("account", acct.ID))
	return acct, true, nil
}

// DeactivateAccount deactivates an account at its own request (RFC 8555
// §7.3.6), notified as deactivated from clientIP.
func (au *Authority) DeactivateAccount(ctx context.Context, id, clientIP string) (store.Account, error) {
	now := au.clock.Now()
	jobs := au.notifyJobs(notify.Event{Event: acme.EventAccountDeactivated, Account: id, ClientAddress: clientIP, Time: now})
	acct, err := au.db.DeactivateAccount(ctx, id, now, jobs...)
	if err != nil {
		return acct, err
	}
	au.Notified(jobs)
	au.log.Info("account deactivated", zap.String("event", acme.EventAccountDeactivated),
		zap.String("profile", au.cfg.Profile), zap.String("account", id))
	return acct, nil
}
