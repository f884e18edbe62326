package authority

import (
	"context"
	"encoding/json"
	"errors"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Issued records the chain of an order a signer finished later
// (signer.Settler). Recording twice is harmless: the second finds the order
// no longer processing.
func (au *Authority) Issued(ctx context.Context, orderID string, chain [][]byte, alternates ...[][]byte) error {
	o, err := au.db.GetOrder(ctx, au.cfg.Profile, orderID)
	if err != nil {
		return err
	}
	if o.Status != acme.StatusProcessing {
		return nil
	}
	_, err = au.recordIssued(ctx, o, chain, alternates, pendingClient(o))
	if errors.Is(err, store.ErrWrongState) {
		return nil
	}
	return err
}

// Failed marks an order a signer gave up on invalid (signer.Settler). The
// client sees a generic problem; detail is kept for the operator. An order
// settled already is left as it is, unaudited: failing twice is harmless.
func (au *Authority) Failed(ctx context.Context, orderID, detail string) error {
	p := problem.InternalF("the certificate could not be issued; the operator can see why")
	if settled, err := au.failAudited(ctx, orderID, p, detail); err != nil || settled {
		return err
	}
	au.metrics.IssueFailed(au.cfg.Profile, "abandoned")
	au.log.Warn("certificate issuance failed", zap.String("event", acme.EventCertificateIssueFailed),
		zap.String("profile", au.cfg.Profile), zap.String("order", orderID), zap.String("detail", detail))
	return nil
}

// Refused marks an order invalid on a verdict its signer reached later
// (signer.Settler): the client sees the problem of the refusal's kind,
// with its detail or a generic one; detail, the signer's reason, is kept
// for the operator.
func (au *Authority) Refused(ctx context.Context, orderID string, refusal *signer.Error, detail string) error {
	p := refusalProblem(refusal, true)
	if p == nil {
		return au.Failed(ctx, orderID, detail)
	}
	if settled, err := au.failAudited(ctx, orderID, p, detail); err != nil || settled {
		return err
	}
	au.metrics.IssueFailed(au.cfg.Profile, failureClass(refusal))
	au.log.Warn("certificate issuance refused by the signer", zap.String("event", acme.EventCertificateIssueFailed),
		zap.String("profile", au.cfg.Profile), zap.String("order", orderID), zap.String("detail", detail))
	return nil
}

// failAudited fails a processing order with p, the client's problem, and
// its certificate_issue_failed audit row in one write, so that neither is
// ever recorded without the other. settled reports an order that was
// finished already: nothing was written.
func (au *Authority) failAudited(ctx context.Context, orderID string, p *problem.Problem, detail string) (settled bool, err error) {
	o, err := au.db.GetOrder(ctx, au.cfg.Profile, orderID)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil // gone (pruned): nothing to fail
	} else if err != nil {
		return false, err
	}
	body, _ := json.Marshal(p)
	ev := au.issueFailedEvent(ctx, o, pendingClient(o), detail)
	if err := au.db.FailOrderAudited(ctx, orderID, body, detail, ev, au.clock.Now()); errors.Is(err, store.ErrWrongState) {
		return true, nil // settled already: nothing failed now
	} else if err != nil {
		return false, err
	}
	au.Notified(ev.Jobs)
	return false, nil
}

// pendingClient is the client that finalized an order a signer finished
// later, as the order's claim for issue recorded it; zero when unknown.
func pendingClient(o store.Order) Client {
	return Client{IP: o.Client.Addr, UserAgent: o.Client.UserAgent}
}
