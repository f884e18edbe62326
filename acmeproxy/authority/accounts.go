package authority

import (
	"context"
	"errors"

	jose "github.com/go-jose/go-jose/v4"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// CreateAccount stores a new account of the profile for a's key (RFC 8555
// §7.3), notified as created from cl; created is false when the key had an
// account already, which is returned instead.
//
// An account with a.EABKID set, verified by the caller (VerifyBinding),
// binds that key in the same transaction; a key that binds nothing new
// any more (revoked, expired, or single-use and bound, perhaps by a
// registration racing this one) refuses the account, with an audit row.
//
// Its unit of accounts_per_ip is spent in the same transaction, only
// when the account is created: a registration that finds the key's
// account (made perhaps by one racing it) is never refused by the limit.
func (au *Authority) CreateAccount(ctx context.Context, a store.Account, cl Client) (acct store.Account, created bool, err error) {
	ls := au.accountLimits(cl, a.EABLabel)
	now := au.clock.Now()
	a.ID, a.Profile = store.NewID(), au.cfg.Profile
	// The account_created row, by the new account, is written with it;
	// a registration that finds the key's account writes none.
	ev := au.event(ctx, acme.EventAccountCreated, OutcomeSuccess, Actor{Kind: ActorAccount, ID: a.ID}, cl)
	ev.At = now
	if a.EABKID != "" {
		ev.Detail = "bound by external account binding key " + a.EABKID
		if a.EABLabel != "" {
			ev.Detail += " (label " + a.EABLabel + ")"
		}
	}
	ev.Jobs = au.notifyJobs(notify.Event{Event: acme.EventAccountCreated, Account: a.ID, ClientAddress: cl.IP, Time: ev.At})
	acct, created, err = au.db.CreateAccountAudited(ctx, a, spendsOf(ls), ev)
	if le, over := errors.AsType[*store.LimitError](err); over {
		return store.Account{}, false, au.deniedBy(ctx, ls, le.Decisions, "", cl)
	}
	if a.EABKID != "" && errors.Is(err, store.ErrWrongState) {
		return acct, false, au.RefuseBinding(ctx, a.Thumbprint, a.EABKID, cl,
			problem.UnauthorizedF("the external account binding's key %s binds no new account: it is revoked, expired or already used", a.EABKID))
	}
	if err != nil || !created {
		return acct, created, err
	}
	au.Notified(ev.Jobs)
	fields := []zap.Field{zap.String("event", acme.EventAccountCreated),
		zap.String("profile", au.cfg.Profile), zap.String("account", acct.ID)}
	if acct.EABKID != "" {
		fields = append(fields, zap.String("eab_kid", acct.EABKID), zap.String("eab_label", acct.EABLabel))
	}
	au.log.Info("account created", fields...)
	return acct, true, nil
}

// DeactivateAccount deactivates an account at its own request (RFC 8555
// §7.3.6) from cl: an account_deactivated audit row by the account, as an
// operator's deactivation is one by the operator, stored with the change
// and with its notifications.
func (au *Authority) DeactivateAccount(ctx context.Context, id string, cl Client) (store.Account, error) {
	ev := au.event(ctx, acme.EventAccountDeactivated, OutcomeSuccess, Actor{Kind: ActorAccount, ID: id}, cl)
	ev.AccountID = id
	ev.Jobs = au.AuditNotifyJobs(ev)
	acct, err := au.db.DeactivateAccountAudited(ctx, id, ev, ev.At)
	if errors.Is(err, store.ErrWrongState) {
		// Deactivated meanwhile, by a request racing this one or an
		// operator: answered as any request of a deactivated account.
		return acct, problem.DeactivatedAccountF("account %s is deactivated", id)
	}
	if err != nil {
		return acct, err
	}
	au.Notified(ev.Jobs)
	au.log.Info("account deactivated", zap.String("event", acme.EventAccountDeactivated),
		zap.String("profile", au.cfg.Profile), zap.String("account", id))
	return acct, nil
}

// UpdateAccountContact replaces an account's contact URLs (RFC 8555
// §7.3.2), checked by the caller. An account deactivated since its
// request was verified is refused as a deactivated account's request is.
func (au *Authority) UpdateAccountContact(ctx context.Context, id string, contact []string) (store.Account, error) {
	acct, err := au.db.UpdateAccountContact(ctx, id, contact, au.clock.Now())
	if errors.Is(err, store.ErrWrongState) {
		return acct, problem.DeactivatedAccountF("account %s is deactivated", id)
	}
	return acct, err
}

// ChangeAccountKey rolls account id over from the key with thumbprint
// oldTP to newKey, whose thumbprint is newTP (RFC 8555 §7.3.5). A new key
// that another account of the profile holds is refused with a conflict;
// holder is then that account's id, for the client to be shown.
func (au *Authority) ChangeAccountKey(ctx context.Context, id, oldTP, newTP string, newKey *jose.JSONWebKey) (updated store.Account, holder string, err error) {
	if other, err := au.db.AccountByKey(ctx, au.cfg.Profile, newTP); err == nil {
		return store.Account{}, other.ID, problem.ConflictF("the new key already belongs to an account")
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Account{}, "", err
	}
	jwk, err := newKey.MarshalJSON()
	if err != nil {
		return store.Account{}, "", err
	}
	updated, err = au.db.ChangeAccountKey(ctx, id, oldTP, newTP, jwk, au.clock.Now())
	switch {
	case errors.Is(err, store.ErrConflict):
		// Another account took the key between the check above and this
		// write: the client is shown that one too (RFC 8555 §7.3.5).
		if other, lerr := au.db.AccountByKey(ctx, au.cfg.Profile, newTP); lerr == nil {
			holder = other.ID
		}
		return updated, holder, problem.ConflictF("the new key already belongs to an account")
	case errors.Is(err, store.ErrWrongState):
		return updated, "", problem.UnauthorizedF("the account's key changed or the account is no longer valid")
	}
	return updated, "", err
}
