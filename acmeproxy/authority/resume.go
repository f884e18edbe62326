package authority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Finalize gives the signer signTimeout to answer; an order processing for
// longer than StuckAfter with no answer recorded was claimed by a process
// that died, and is resumed by ResumeStuckOrders. StuckAfter is well above
// signTimeout so a slow but live finalize is never signed twice.
const (
	signTimeout = time.Minute
	StuckAfter  = 5 * time.Minute
)

// ResumeStuckOrders finishes orders a crash, or a fault on our side, left
// in processing: it re-applies the profile's current policy (a config
// reload may have denied a name since; such an order fails), then hands
// each back to the signer with the CSR stored at claim time. A signer that
// answers Pending treats the repeat as a no-op (its own job is keyed by the
// order), so this is safe for every signer. It returns how many it resumed.
func (au *Authority) ResumeStuckOrders(ctx context.Context) (int, error) {
	now := au.clock.Now()
	stuck, err := au.db.ReclaimStuckOrders(ctx, au.cfg.Profile, now.Add(-StuckAfter), now, 100)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, o := range stuck {
		csr, err := x509.ParseCertificateRequest(o.CSR)
		if err != nil {
			errs = append(errs, fmt.Errorf("order %s: stored CSR: %w", o.ID, err))
			continue
		}
		idents := o.Identifiers
		if prob := au.policyRefusal(idents); prob != nil {
			au.failOrder(ctx, o, prob, "refused at resume by the profile's current policy: "+prob.Detail, Client{})
			continue
		}
		cp, prob := au.orderCertificateProfile(o.CertificateProfile)
		if prob != nil {
			au.failOrder(ctx, o, prob, "refused at resume: "+prob.Detail, Client{})
			continue
		}
		au.log.Info("resuming an order a crash left processing", zap.String("event", "order_resumed"),
			zap.String("profile", au.cfg.Profile), zap.String("order", o.ID))
		if _, err := au.issue(ctx, o, signer.IssueRequest{
			OrderID: o.ID, Profile: au.cfg.Profile, CSR: csr, CSRDER: o.CSR,
			Identifiers: idents, NotBefore: o.NotBefore, NotAfter: o.NotAfter, CRLURL: au.crlURL(),
			ClientAddr: o.Client.Addr, UserAgent: o.Client.UserAgent, // as the claim recorded them
			CertificateProfile: cp.signerProfile(), Replaces: o.Replaces,
		}, true); err != nil {
			errs = append(errs, fmt.Errorf("order %s: %w", o.ID, err))
		}
	}
	return len(stuck), errors.Join(errs...)
}
