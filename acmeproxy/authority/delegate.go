package authority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Serving a profile without its signer (signer.Delegate): the front end's
// authority records finalized orders and queues them for the instances
// that hold the signer; those publish in the store what the front end
// needs to answer as they would (PublishSigner), and the front end reads
// it (published).

// publishedRecheck is how long a front end keeps a publication in memory
// before it reads the store again.
const publishedRecheck = 5 * time.Second

// publication caches a profile's signer publication: read by a
// delegate's authority, or the last one written by a signing one.
type publication struct {
	mu   sync.Mutex
	pub  store.SignerPublication
	read time.Time
	ok   bool
}

// Delegates reports whether the profile is served here without its
// signer.
func (au *Authority) Delegates() bool { return signer.IsDelegate(au.signer) }

// SigningLane is the job lane of the work only an instance holding the
// profile's signer does; "" for a delegate, which serves none.
func (au *Authority) SigningLane() string {
	if au.Delegates() {
		return ""
	}
	return signer.SigningLane(au.cfg.Profile)
}

// errNotPublished: a delegate's profile has no publication yet: no
// instance holding its signer has started on this store.
var errNotPublished = fmt.Errorf("%w: no instance holding the profile's signer has published it yet", signer.ErrIssuerUnavailable)

// published is what the instances holding the profile's signer published,
// for a delegate: from memory, rechecked every few seconds. The error
// wraps errNotPublished when nothing is published yet.
func (au *Authority) published(ctx context.Context) (store.SignerPublication, error) {
	c := &au.pub
	c.mu.Lock()
	defer c.mu.Unlock()
	now := au.clock.Now()
	if c.ok && now.Sub(c.read) < publishedRecheck {
		return c.pub, nil
	}
	readCtx := ctx
	if c.ok {
		// With a publication in hand, a database that does not answer
		// soon is not waited for (the lock is held meanwhile): the last
		// one read is served, as the CRL it names is.
		var cancel context.CancelFunc
		readCtx, cancel = context.WithTimeout(ctx, crlRecheckWait)
		defer cancel()
	}
	p, err := au.db.SignerPublished(readCtx, au.cfg.Profile)
	switch {
	case errors.Is(err, store.ErrNotFound) && c.ok:
		// Withdrawn? Publications are never deleted; keep the last one.
	case errors.Is(err, store.ErrNotFound):
		return store.SignerPublication{}, errNotPublished
	case err != nil && c.ok:
		au.log.Warn("reading the signer's publication; serving the last one read", zap.String("event", "signer_publication_read_failed"),
			zap.String("profile", au.cfg.Profile), zap.Error(err))
		c.read = now // the next attempt waits for the next recheck, not each request in turn
		return c.pub, nil
	case err != nil:
		return store.SignerPublication{}, err
	default:
		c.pub, c.ok = p, true
	}
	c.read = now
	return c.pub, nil
}

// newCRLSkew is how much earlier than a delegate's read of the
// publication a CRL's thisUpdate, by its worker's clock, may be for the
// CA to be taken as one that began issuing since (LookupIssuer).
const newCRLSkew = time.Minute

// publishedAt is when the publication was last read.
func (au *Authority) publishedAt() time.Time {
	au.pub.mu.Lock()
	defer au.pub.mu.Unlock()
	return au.pub.read
}

// publishedNow is published, read from the store now.
func (au *Authority) publishedNow(ctx context.Context) (store.SignerPublication, error) {
	au.pub.mu.Lock()
	au.pub.read = time.Time{}
	au.pub.mu.Unlock()
	return au.published(ctx)
}

// Publish writes, for a profile whose signer is mounted here, what the
// instances serving it without the signer need: the signer's name, its
// revocation route, its CA chain and the CAs whose CRLs it publishes. It
// writes only when that changed since this authority last wrote it. For a
// delegate it does nothing.
func (au *Authority) Publish(ctx context.Context) error {
	if au.Delegates() {
		return nil
	}
	p := store.SignerPublication{Profile: au.cfg.Profile, Signer: au.signerName, Revocation: store.RevocationLedger}
	if p.Signer == "" {
		p.Signer = "unnamed"
	}
	if au.signer.RevocationRoute() == signer.RevokeByJob {
		p.Revocation = store.RevocationJob
	}
	if c, ok := au.signer.(signer.CAChainer); ok {
		chain, err := c.CAChain(ctx)
		if err != nil {
			return fmt.Errorf("publishing profile %s: its CA chain: %w", au.cfg.Profile, err)
		}
		p.CAChainPEM = string(PEMChain(chain))
	}
	if cs, ok := au.CRLSigner(); ok {
		cur, err := cs.CRLIssuer(ctx)
		if err != nil {
			return fmt.Errorf("publishing profile %s: its issuing CA: %w", au.cfg.Profile, err)
		}
		issuers, err := cs.CRLIssuers(ctx)
		if err != nil {
			return fmt.Errorf("publishing profile %s: its CAs: %w", au.cfg.Profile, err)
		}
		p.CurrentIssuer = cur
		for _, iss := range issuers {
			p.Issuers = append(p.Issuers, store.PublishedIssuer{KeyID: iss.KeyID, NameID: iss.NameID, Subject: iss.Subject, NotAfter: iss.NotAfter.UTC()})
		}
	}
	c := &au.pub
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && samePublication(c.pub, p) {
		return nil
	}
	p.UpdatedAt = au.clock.Now()
	if err := au.db.PublishSigner(ctx, p); err != nil {
		return err
	}
	c.pub, c.ok, c.read = p, true, p.UpdatedAt
	au.log.Info("signer published for instances serving the profile without it", zap.String("event", "signer_published"),
		zap.String("profile", au.cfg.Profile), zap.String("signer", p.Signer), zap.String("revocation", p.Revocation),
		zap.String("issuer", p.CurrentIssuer))
	return nil
}

func samePublication(a, b store.SignerPublication) bool {
	return a.Signer == b.Signer && a.Revocation == b.Revocation && a.CAChainPEM == b.CAChainPEM &&
		a.CurrentIssuer == b.CurrentIssuer && slices.EqualFunc(a.Issuers, b.Issuers, func(x, y store.PublishedIssuer) bool {
		return x.KeyID == y.KeyID && x.NameID == y.NameID && x.Subject == y.Subject && x.NotAfter.Equal(y.NotAfter)
	})
}

// PublishAll publishes every profile of authorities whose signer is
// mounted here (Publish).
func PublishAll(ctx context.Context, authorities []*Authority) error {
	var errs []error
	for _, au := range authorities {
		errs = append(errs, au.Publish(ctx))
	}
	return errors.Join(errs...)
}

// revokesByJob reports whether a revocation is carried by a signer_revoke
// job (true) or recorded in the ledger here: the signer's route, or for a
// delegate the route its publication names. The error of a delegate with
// nothing published wraps ErrUnpublishable and signer.ErrIssuerUnavailable:
// nothing can be recorded now, asking later may succeed.
func (au *Authority) revokesByJob(ctx context.Context) (bool, error) {
	if !au.Delegates() {
		return au.signer.RevocationRoute() == signer.RevokeByJob, nil
	}
	p, err := au.published(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrUnpublishable, err)
	}
	return p.Revocation == store.RevocationJob, nil
}

// RevokesInLedger reports whether the profile's revocations are
// recorded in the ledger of its database — a local CA's, or for a
// delegate one whose signing instances published that route — where an
// operator may change a recorded revocation's reason to keyCompromise;
// false for a backend's (relay, script). The error of a delegate with
// nothing published yet wraps ErrUnpublishable.
func (au *Authority) RevokesInLedger(ctx context.Context) (bool, error) {
	byJob, err := au.revokesByJob(ctx)
	return err == nil && !byJob, err
}

// publishedIssuer is the issuer keyID of a delegate's publication; the
// error wraps signer.ErrIssuerUnknown when it names none such.
func publishedIssuer(p store.SignerPublication, keyID string) (signer.IssuerInfo, error) {
	for _, iss := range p.Issuers {
		if iss.KeyID == keyID {
			return signer.IssuerInfo{KeyID: iss.KeyID, NameID: iss.NameID, Subject: iss.Subject, NotAfter: iss.NotAfter}, nil
		}
	}
	return signer.IssuerInfo{}, fmt.Errorf("%w: profile %s published no CA %s", signer.ErrIssuerUnknown, p.Profile, keyID)
}

// CRLIssuersInService lists the CAs whose CRLs the profile keeps
// publishing now: its signer's — the CA it issues from and each earlier
// one until that CA expires — or, for a delegate, those its signing
// instances published and that have not expired. None for a signer that
// publishes no CRL.
func (au *Authority) CRLIssuersInService(ctx context.Context) ([]signer.IssuerInfo, error) {
	if au.Delegates() {
		p, err := au.published(ctx)
		if errors.Is(err, errNotPublished) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		now := au.clock.Now()
		var out []signer.IssuerInfo
		for _, iss := range p.Issuers {
			if now.Before(iss.NotAfter) {
				out = append(out, signer.IssuerInfo{KeyID: iss.KeyID, NameID: iss.NameID, Subject: iss.Subject, NotAfter: iss.NotAfter})
			}
		}
		return out, nil
	}
	cs, ok := au.CRLSigner()
	if !ok {
		return nil, nil
	}
	return cs.CRLIssuers(ctx)
}

// ServesCRL reports whether the profile serves a CRL at <prefix>/crl:
// its signer signs CRLs, or, for a delegate, the instances holding its
// signer published a CA whose CRL they sign (the delegate serves those
// from the store). A delegate whose signer has published nothing yet, or
// one whose signer signs no CRL (a relay's), serves none.
func (au *Authority) ServesCRL(ctx context.Context) (bool, error) {
	if !au.Delegates() {
		_, ok := au.CRLSigner()
		return ok, nil
	}
	p, err := au.published(ctx)
	if errors.Is(err, errNotPublished) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return p.CurrentIssuer != "", nil
}

// LookupIssuer describes the CA with key id keyID whose CRL the profile
// serves. The error wraps signer.ErrIssuerUnknown when the profile
// publishes no CRL for it (or none at all).
func (au *Authority) LookupIssuer(ctx context.Context, keyID string) (signer.IssuerInfo, error) {
	if au.Delegates() {
		p, err := au.published(ctx)
		if errors.Is(err, errNotPublished) {
			return signer.IssuerInfo{}, fmt.Errorf("%w: %w", signer.ErrIssuerUnknown, err)
		}
		if err != nil {
			return signer.IssuerInfo{}, err
		}
		iss, err := publishedIssuer(p, keyID)
		if !errors.Is(err, signer.ErrIssuerUnknown) {
			return iss, err
		}
		// A CA the publication read last does not name but whose CRL
		// was published about when it was read began issuing since: its
		// worker published both before its first leaf was returned
		// (ensureLeafCRL), and that leaf's distribution point is asked
		// for now. Read the publication again rather than answer 404
		// until the recheck. (An expired CA, left out of the
		// publication, has an older CRL: asking for it reads no more.)
		crl, cerr := au.db.GetCRLInfo(ctx, keyID)
		if cerr != nil || !crl.ThisUpdate.After(au.publishedAt().Add(-newCRLSkew)) {
			return iss, err
		}
		if p, err = au.publishedNow(ctx); err != nil {
			return signer.IssuerInfo{}, err
		}
		return publishedIssuer(p, keyID)
	}
	cs, ok := au.CRLSigner()
	if !ok {
		return signer.IssuerInfo{}, fmt.Errorf("%w: the signer of profile %s publishes no CRL", signer.ErrIssuerUnknown, au.cfg.Profile)
	}
	return cs.LookupCRLIssuer(ctx, keyID)
}

// CAChain is the issuing CA chain the profile serves as ca.pem (DER,
// issuing CA first): the signer's, or for a delegate the one published.
// ok is false when there is none.
func (au *Authority) CAChain(ctx context.Context) (chain [][]byte, ok bool, err error) {
	if !au.Delegates() {
		c, ok := au.signer.(signer.CAChainer)
		if !ok {
			return nil, false, nil
		}
		chain, err := c.CAChain(ctx)
		return chain, true, err
	}
	p, err := au.published(ctx)
	if errors.Is(err, errNotPublished) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	chain = signer.ChainDERs([]byte(p.CAChainPEM))
	return chain, len(chain) > 0, nil
}

// ---- signer_issue: the worker's side of a delegated finalize ----

type issueJobPayload signer.IssueJob

func (p issueJobPayload) profileName() string { return p.Profile }

// DelegatedIssueJobs runs signer_issue jobs (signer.IssueKind), which a
// delegate queues for each order it finalizes, on an instance that holds
// the profile's signer: the order, as its finalize stored it, goes to
// the signer as a resumed order would. Only runners serving the profile's
// SigningLane claim these jobs; one whose profile is here only as a
// delegate (the lane served for another reason) is retried later.
func DelegatedIssueJobs(profiles Profiles, logger *zap.Logger) jobs.Handler {
	if logger == nil {
		logger = zap.NewNop()
	}
	h := &profileJobs[issueJobPayload]{kind: signer.IssueKind, profiles: profiles,
		run: func(ctx context.Context, au *Authority, _ *jobs.Job, p issueJobPayload) jobs.Outcome {
			if au.Delegates() {
				return jobs.RetryAfter("profile "+p.Profile+" is mounted here without its signer", notMountedDelay)
			}
			return au.runDelegatedIssue(ctx, p.Order)
		}}
	// The order cannot be signed: it fails with a generic problem, the
	// reason is the operator's. Failing it is a guarded write, so an
	// abandon tried again (after an outage, or a crash before the job's
	// retirement was recorded) fails it once.
	h.abandon = func(ctx context.Context, job *jobs.Job, reason string) error {
		au, p, ok, err := h.lookup(job)
		if err != nil || !ok || au.Delegates() {
			logger.Warn("delegated issuance abandoned where the profile's signer is not mounted", zap.String("event", "signer_job_orphaned"),
				zap.String("kind", job.Kind), zap.Int64("job", job.ID), zap.String("order", p.Order), zap.String("reason", reason))
			return nil
		}
		o, err := au.db.GetOrder(ctx, au.cfg.Profile, p.Order)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return err
		case o.Status != acme.StatusProcessing || o.CertificateID != "":
			return nil
		}
		detail := "the delegated issuance was abandoned: " + reason
		if settled, err := au.failAudited(ctx, o.ID, problem.Internal(), detail); err != nil || settled {
			return err
		}
		au.metrics.IssueFailed(au.cfg.Profile, "abandoned")
		au.log.Warn("certificate issuance failed", zap.String("event", acme.EventCertificateIssueFailed),
			zap.String("profile", au.cfg.Profile), zap.String("order", o.ID), zap.String("detail", detail))
		return nil
	}
	return h
}

// runDelegatedIssue hands a delegated order to the profile's signer.
func (au *Authority) runDelegatedIssue(ctx context.Context, orderID string) jobs.Outcome {
	o, err := au.db.GetOrder(ctx, au.cfg.Profile, orderID)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Failed("no order " + orderID + " in profile " + au.cfg.Profile)
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	if o.Status != acme.StatusProcessing || o.CertificateID != "" {
		// Settled already: signed by the resume sweep, or failed.
		return jobs.Done()
	}
	err = au.signStored(ctx, o)
	if _, verdict := problem.As(err); err != nil && !verdict {
		return jobs.Retry(err.Error())
	}
	return jobs.Done()
}

// signStored hands a processing order, as its claim stored it, to the
// signer: the current policy and certificate profile are applied first,
// and the CAA records of names validated more than CAARecheckAfter ago
// are checked again (an order they now refuse fails). The error is a
// *problem.Problem when the order was failed for a verdict, any other
// for a fault on our side (the order stays processing).
func (au *Authority) signStored(ctx context.Context, o store.Order) error {
	csr, err := x509.ParseCertificateRequest(o.CSR)
	if err != nil {
		return fmt.Errorf("order %s: stored CSR: %w", o.ID, err)
	}
	if prob := au.policyRefusal(o.Identifiers); prob != nil {
		if au.failOrder(ctx, o, prob, "refused at resume by the profile's current policy: "+prob.Detail, Client{}) {
			au.metrics.IssueFailed(au.cfg.Profile, "rejected_identifier")
		}
		return prob
	}
	cp, prob := au.orderCertificateProfile(o.CertificateProfile)
	if prob != nil {
		if au.failOrder(ctx, o, prob, "refused at resume: "+prob.Detail, Client{}) {
			au.metrics.IssueFailed(au.cfg.Profile, "invalid_profile")
		}
		return prob
	}
	// Signed later than its finalize, the order may be signed more than
	// CAARecheckAfter after its names' CAA records were last checked.
	prob, err = au.caaRecheckStored(ctx, o)
	if err != nil {
		return err // the records unknown: the order waits, tried again
	}
	if prob != nil {
		if au.failOrder(ctx, o, prob, "refused before signing by the CAA records, checked again: "+prob.Detail, Client{}) {
			au.metrics.IssueFailed(au.cfg.Profile, "caa")
		}
		return prob
	}
	_, err = au.issue(ctx, o, signer.IssueRequest{
		OrderID: o.ID, Profile: au.cfg.Profile, CSR: csr, CSRDER: o.CSR,
		Identifiers: o.Identifiers, NotBefore: o.NotBefore, NotAfter: o.NotAfter, CRLURL: au.crlURL(),
		ClientAddr: o.Client.Addr, UserAgent: o.Client.UserAgent, // as the claim recorded them
		CertificateProfile: cp.signerProfile(), Replaces: o.Replaces,
	}, true)
	return err
}
