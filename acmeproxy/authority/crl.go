package authority

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Job kinds of CRL publishing.
const (
	// CRLRegenerateKind rebuilds the CRL of one issuing CA; keyed by the
	// CA's key id, so that revocations queued while one is waiting share
	// it. Its deadline is the CA's notAfter.
	CRLRegenerateKind = "crl_regenerate"
	// CRLRefreshKind is the periodic check that regenerates a CRL that is
	// missing, stale (its ledger moved on, e.g. after a crash) or old.
	CRLRefreshKind = "crl_refresh"
)

const (
	// CRLValidity is a CRL's nextUpdate − thisUpdate.
	CRLValidity = 24 * time.Hour
	// CRLRefreshAge is how old a CRL may get before the refresh replaces
	// it even when nothing was revoked: two thirds of its validity early.
	CRLRefreshAge = CRLValidity / 3
	// CRLRefreshEvery is how often the refresh runs.
	CRLRefreshEvery = time.Minute
	// CRLKeepsExpired is how long past its certificate's notAfter a
	// revocation stays on the CRLs: RFC 5280 §3.3 removes an entry only
	// once it has appeared on a regularly scheduled CRL issued after the
	// certificate expired, and the refresh publishes one at least every
	// CRLRefreshAge.
	CRLKeepsExpired = CRLValidity
	// crlRecheck is how long the served CRL is taken from memory before
	// the store is asked whether another instance published a newer one.
	crlRecheck = 5 * time.Second
	// crlRecheckWait bounds that recheck: past it the cached CRL, still
	// valid, is served as it is.
	crlRecheckWait = 2 * time.Second
	// crlSameSecondWait is the longest a regeneration waits for a
	// thisUpdate after the stored CRL's (runCRL): one second, and a few
	// for instances whose clocks differ.
	crlSameSecondWait = 5 * time.Second
	// crlMaxAttempts is a crl_regenerate job's attempt budget.
	crlMaxAttempts = 12
	// CRLCoalesce is the least time between the starts of two
	// regenerations of one CA's CRL by this server: revocations that
	// arrive meanwhile share the next one, so a burst of them (a mass
	// revocation) costs a regeneration per CRLCoalesce, not one each. A
	// revocation is on the CRL this server serves at most CRLCoalesce
	// plus two regenerations after it was recorded (one regeneration
	// that had read the ledger just before it, then the one that lists
	// it): about 1.8 s with 100,000 entries on the CRL.
	CRLCoalesce = time.Second
)

// ErrNoCRL: no CRL has been published for the issuer yet.
var ErrNoCRL = errors.New("no CRL has been published for this CA yet")

// errLeafCRLUnpublished: a leaf is not recorded, since the CRL it names
// could not be published (ensureLeafCRL).
var errLeafCRLUnpublished = errors.New("the CRL the leaf names cannot be published now")

// crlCache keeps the CRLs a server publishes or serves, by issuer, and
// when this server last began building one.
type crlCache struct {
	mu      sync.Mutex
	m       map[string]cachedCRL
	started map[string]time.Time
	built   map[string]*keptCRL
	// stored holds the issuers known to have a CRL in the store (rows of
	// crls are never deleted): a leaf of one of them may be recorded
	// without asking the store (see ensureLeafCRL).
	stored map[string]bool
	// first serializes the publishing of issuers' first CRLs at
	// issuance, so that the concurrent first leaves of a new CA wait
	// for one CRL rather than each publishing its own.
	first sync.Mutex
}

// isStored reports whether issuer is known to have a CRL in the store.
func (c *crlCache) isStored(issuer string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stored[issuer]
}

// markStored notes that issuer has a CRL in the store.
func (c *crlCache) markStored(issuer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.markStoredLocked(issuer)
}

func (c *crlCache) markStoredLocked(issuer string) {
	if c.stored == nil {
		c.stored = map[string]bool{}
	}
	c.stored[issuer] = true
}

// begin notes that a build of issuer's CRL starts at now.
func (c *crlCache) begin(issuer string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		c.started = map[string]time.Time{}
	}
	c.started[issuer] = now
}

// nextStart is the earliest time this server begins another build of
// issuer's CRL (see CRLCoalesce).
func (c *crlCache) nextStart(issuer string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.started[issuer]; ok {
		return t.Add(CRLCoalesce)
	}
	return time.Time{}
}

// checkedAt marks the cached CRL of issuer, numbered number, as the
// store's latest at now; false when the cache holds another.
func (c *crlCache) checkedAt(issuer string, number int64, now time.Time) (cachedCRL, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[issuer]
	if !ok || e.crl.Number != number {
		return cachedCRL{}, false
	}
	e.checked = now
	c.m[issuer] = e
	return e, true
}

type cachedCRL struct {
	crl     store.CRL
	checked time.Time
}

func (c *crlCache) get(issuer string) (cachedCRL, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[issuer]
	return e, ok
}

// put keeps crl unless a newer one is held already.
func (c *crlCache) put(crl store.CRL, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedCRL{}
	}
	c.markStoredLocked(crl.IssuerKeyID)
	if old, ok := c.m[crl.IssuerKeyID]; ok && old.crl.Number > crl.Number {
		old.checked = now
		c.m[crl.IssuerKeyID] = old
		return
	}
	c.m[crl.IssuerKeyID] = cachedCRL{crl: crl, checked: now}
}

// CRLSigner is the profile's signer as a CRL signer, if it is one.
func (au *Authority) CRLSigner() (signer.CRLSigner, bool) {
	cs, ok := au.signer.(signer.CRLSigner)
	return cs, ok
}

// CurrentIssuer describes the CA the profile issues from now.
func (au *Authority) CurrentIssuer(ctx context.Context) (signer.IssuerInfo, error) {
	if au.Delegates() {
		p, err := au.published(ctx)
		if errors.Is(err, errNotPublished) || err == nil && p.CurrentIssuer == "" {
			return signer.IssuerInfo{}, problem.NotFound("CRL")
		}
		if err != nil {
			return signer.IssuerInfo{}, err
		}
		return publishedIssuer(p, p.CurrentIssuer)
	}
	cs, ok := au.CRLSigner()
	if !ok {
		return signer.IssuerInfo{}, problem.NotFound("CRL")
	}
	id, err := cs.CRLIssuer(ctx)
	if err != nil {
		return signer.IssuerInfo{}, err
	}
	return cs.LookupCRLIssuer(ctx, id)
}

// CurrentCRL returns the latest CRL of the CA the profile issues from now,
// as IssuerCRL does.
func (au *Authority) CurrentCRL(ctx context.Context) (store.CRL, error) {
	iss, err := au.CurrentIssuer(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	return au.IssuerCRL(ctx, iss)
}

// IssuerCRL returns the latest CRL of iss, from memory, rechecking the
// store every few seconds for one another instance published (reading
// only its number unless it is another). With none
// published yet it queues one and returns an error wrapping ErrNoCRL; for
// a CA past its notAfter nothing is queued any more.
func (au *Authority) IssuerCRL(ctx context.Context, iss signer.IssuerInfo) (store.CRL, error) {
	now := au.clock.Now()
	e, cached := au.crls.get(iss.KeyID)
	if cached && now.Sub(e.checked) < crlRecheck && now.Before(e.crl.NextUpdate) {
		return e.crl, nil
	}
	valid := cached && now.Before(e.crl.NextUpdate)
	if valid {
		// A cached CRL that is still valid serves a relying party better
		// than an error: a database that does not answer within
		// crlRecheckWait, or at all, leaves it served.
		rctx, cancel := context.WithTimeout(ctx, crlRecheckWait)
		n, err := au.db.CRLNumber(rctx, iss.KeyID)
		cancel()
		if err != nil {
			return e.crl, nil
		}
		if n <= e.crl.Number {
			if e, ok := au.crls.checkedAt(iss.KeyID, e.crl.Number, now); ok {
				return e.crl, nil
			}
		}
	}
	crl, err := au.db.GetCRL(ctx, iss.KeyID)
	if err != nil && valid && !errors.Is(err, store.ErrNotFound) {
		return e.crl, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		if !now.Before(iss.NotAfter) {
			return store.CRL{}, problem.NotFound("CRL")
		}
		if qerr := au.queueCRL(ctx, iss, false); qerr != nil {
			return store.CRL{}, qerr
		}
		return store.CRL{}, fmt.Errorf("%w (issuer %s)", ErrNoCRL, iss.KeyID)
	}
	if err != nil {
		return store.CRL{}, err
	}
	if !now.Before(crl.NextUpdate) {
		// Past its nextUpdate: still the best there is, but get a new one.
		if qerr := au.queueCRL(ctx, iss, false); qerr != nil {
			au.log.Error("queueing a CRL regeneration", zap.String("event", "crl_queue_failed"), zap.Error(qerr))
		}
	}
	au.crls.put(crl, now)
	e, _ = au.crls.get(iss.KeyID)
	return e.crl, nil
}

// ensureLeafCRL makes sure the CRL that leaf's distribution point names
// can be fetched before the leaf is recorded (and so returned): the first
// leaf of a CA — Caddy renewed its intermediate, an operator imported
// another — would otherwise name a CRL that no instance serves until the
// periodic refresh publishes one, and a relying party that checks
// revocation (openssl verify -crl_check) refuses the leaf meanwhile. The
// CA's first CRL is published here, and the signer's publication is
// updated so that instances serving the profile without its signer serve
// it too. A CA known to have a CRL costs a map lookup; one this server
// has not seen one of, a read of the store (another instance may have
// published it). Leaves without a distribution point, and those of a
// signer that publishes no CRL, need nothing.
func (au *Authority) ensureLeafCRL(ctx context.Context, leaf *x509.Certificate) error {
	if _, ok := au.CRLSigner(); !ok || len(leaf.CRLDistributionPoints) == 0 {
		return nil
	}
	id := signer.LeafIssuerKeyID(leaf)
	if au.crls.isStored(id) {
		return nil
	}
	au.crls.first.Lock()
	defer au.crls.first.Unlock()
	if au.crls.isStored(id) {
		return nil
	}
	_, err := au.db.GetCRLInfo(ctx, id)
	if err == nil {
		au.crls.markStored(id)
		return nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: looking up the CRL of CA %s: %w", errLeafCRLUnpublished, id, err)
	}
	iss, err := au.knownIssuer(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: the CA of a new leaf: %w", errLeafCRLUnpublished, err)
	}
	// A first CRL another instance stored meanwhile, in this second, is
	// the CRL the leaf names: published.
	if _, err := au.publishCRL(ctx, iss, true, nil); err != nil && !errors.As(err, new(*crlTooSoonError)) {
		return fmt.Errorf("%w: publishing the first CRL of CA %s: %w", errLeafCRLUnpublished, id, err)
	}
	if err := au.Publish(ctx); err != nil {
		// The CRL is in the store; instances without the signer serve it
		// once the next refresh publishes the CA (within a minute).
		au.log.Warn("publishing a new issuing CA for instances serving the profile without its signer",
			zap.String("event", "signer_publish_failed"), zap.String("profile", au.cfg.Profile),
			zap.String("issuer", id), zap.Error(err))
	}
	return nil
}

// crlPayload is a crl_regenerate job's payload.
type crlPayload struct {
	Profile string `json:"profile"`
	Issuer  string `json:"issuer"`
}

// queueCRL queues the regeneration of an issuer's CRL: at once, or
// CRLCoalesce after this server last began one, so that the revocations
// of a burst share it (a queued job is found by the next enqueue and
// shared). The job's deadline is the CA's notAfter: past it no leaf of
// the CA is valid, and a job still waiting (for a profile to mount it,
// for its key) is retired instead of retried forever. For a CA past it
// nothing is queued.
//
// afterRevocation is for the regeneration a revocation just committed
// asks for: a job found running is asked to run once more
// (jobs.Spec.Rerun), since its build may have read the ledger before
// the revocation. Any other request (the refresh, a fetch of a CRL not
// yet published or past its nextUpdate) leaves a running job to finish:
// nothing changed that it would miss — a revocation it missed asked
// for its own run, and its own stale check catches those before it —
// and another build would only sign one CRL more.
func (au *Authority) queueCRL(ctx context.Context, iss signer.IssuerInfo, afterRevocation bool) error {
	now := au.clock.Now()
	if !now.Before(iss.NotAfter) {
		return nil
	}
	_, _, err := au.queue.Enqueue(context.WithoutCancel(ctx), jobs.Spec{
		Kind: CRLRegenerateKind, Key: iss.KeyID, Lane: signer.SigningLane(au.cfg.Profile), Payload: crlPayload{Profile: au.cfg.Profile, Issuer: iss.KeyID},
		Delay: au.crls.nextStart(iss.KeyID).Sub(now), Deadline: iss.NotAfter, MaxAttempts: crlMaxAttempts,
		Rerun: afterRevocation,
	})
	return err
}

// RegenerateCRL publishes a new CRL for the CA the profile issues from
// now, and returns it, built now: in the second of the stored CRL's
// thisUpdate, if that is now. What serves the CRL it builds to clients
// regenerates with RegenerateCRLAfterStored.
func (au *Authority) RegenerateCRL(ctx context.Context) (store.CRL, error) {
	iss, err := au.regenerated(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	return au.publishCRL(ctx, iss, false, nil)
}

// regenerated is the CA whose CRL a regeneration builds: the one the
// profile issues from now.
func (au *Authority) regenerated(ctx context.Context) (signer.IssuerInfo, error) {
	if _, ok := au.CRLSigner(); !ok {
		return signer.IssuerInfo{}, fmt.Errorf("%w: the signer of profile %s publishes no CRL", store.ErrNotFound, au.cfg.Profile)
	}
	return au.CurrentIssuer(ctx)
}

// RegenerateCRLAfterStored is RegenerateCRL for an operator, actor,
// holding the promise a crl_regenerate job holds (runCRL): the CRL is
// built in a later second than the stored one's thisUpdate, waiting for
// that second (at most crlSameSecondWait), so that a client revalidating
// with If-Modified-Since alone is not told 304 for a CRL it does not
// hold, and thisUpdate grows with cRLNumber.
func (au *Authority) RegenerateCRLAfterStored(ctx context.Context, actor Actor) (store.CRL, error) {
	iss, err := au.regenerated(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	audit := func(crl store.CRL) store.AuditEvent {
		return store.AuditEvent{At: au.clock.Now(), Event: acme.EventCRLRegenerated, Outcome: OutcomeSuccess, Profile: au.cfg.Profile,
			ActorKind: actor.Kind, ActorID: actor.ID, Reason: "operator",
			Detail: fmt.Sprintf("CRL %d of CA %s (%s), %d entries, next update %s", crl.Number, crl.IssuerKeyID, iss.Subject, crl.Entries,
				crl.NextUpdate.UTC().Format(time.RFC3339))}
	}
	for {
		crl, err := au.publishCRL(ctx, iss, true, audit)
		var soon *crlTooSoonError
		if !errors.As(err, &soon) {
			return crl, err
		}
		// Another regeneration (a job, another instance's) may publish
		// meanwhile: the next build follows whichever CRL is stored then.
		t := au.clock.NewTimer(soon.wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return store.CRL{}, ctx.Err()
		}
	}
}

// crlSecondWait is how long a regeneration at now waits before it builds
// a CRL to follow cur: until the second after cur's thisUpdate, since a
// client that revalidates with If-Modified-Since alone tells CRLs apart
// by their Last-Modified, the thisUpdate to the second — unless cur is
// further ahead than the clocks of instances differ by
// (crlSameSecondWait): then not at all.
func crlSecondWait(cur store.CRL, now time.Time) time.Duration {
	wait := cur.ThisUpdate.Add(time.Second).Sub(now)
	if this, _ := crlTimes(now); !this.After(cur.ThisUpdate) && wait <= crlSameSecondWait {
		return wait
	}
	return 0
}

// crlTooSoonError: a build that follows the stored CRL in a later second
// found, when it read the ledger, a CRL stored in its own second — by a
// build that ran beside it, on this instance or another, after the
// caller last looked. It may build after wait.
type crlTooSoonError struct {
	follows time.Time
	wait    time.Duration
}

func (e *crlTooSoonError) Error() string {
	return fmt.Sprintf("a CRL with the thisUpdate of this second (%s) was stored meanwhile", e.follows.UTC().Format(time.RFC3339))
}

// checkFollows is, for a build at now that must follow the stored CRL
// in a later second (follow), a crlTooSoonError when the CRL stored when
// r was read has the thisUpdate of now's second.
func checkFollows(r store.CRLRead, now time.Time, follow bool) error {
	if !follow || r.Follows.IsZero() {
		return nil
	}
	if wait := crlSecondWait(store.CRL{ThisUpdate: r.Follows}, now); wait > 0 {
		return &crlTooSoonError{follows: r.Follows, wait: wait}
	}
	return nil
}

// publishCRL builds, signs and stores a new CRL of iss from the ledger,
// numbered in the sequence of the CA's name. The store builds it outside
// its write path (store.PublishCRL), so issuance goes on meanwhile. A
// signer that takes encoded entries gets those this server kept of its
// last CRL of iss and those revoked since (publishKeptCRL). With follow,
// it builds only in a later second than the stored CRL's thisUpdate
// (crlTooSoonError otherwise), as what serves it to clients promises.
// audit, when not nil, is the audit row of the CRL stored, written with
// it (store.PublishCRLFromAudited).
func (au *Authority) publishCRL(ctx context.Context, iss signer.IssuerInfo, follow bool, audit func(store.CRL) store.AuditEvent) (store.CRL, error) {
	cs, ok := au.CRLSigner()
	if !ok {
		return store.CRL{}, fmt.Errorf("the signer of profile %s publishes no CRL", au.cfg.Profile)
	}
	now := au.clock.Now()
	au.crls.begin(iss.KeyID, now)
	var (
		crl   store.CRL
		delta bool
		err   error = errors.ErrUnsupported
	)
	if ecs, ok := cs.(signer.EncodedCRLSigner); ok {
		crl, delta, err = au.publishKeptCRL(ctx, ecs, iss, now, follow, audit)
	}
	if errors.Is(err, errors.ErrUnsupported) {
		crl, err = au.publishTemplateCRL(ctx, cs, iss, now, follow, audit)
	}
	if err != nil {
		return store.CRL{}, err
	}
	au.crls.put(crl, now)
	au.log.Info("CRL published", zap.String("event", "crl_published"), zap.String("profile", au.cfg.Profile),
		zap.String("issuer", iss.KeyID), zap.String("issuer_name", iss.Subject), zap.Int64("number", crl.Number),
		zap.Int("entries", crl.Entries), zap.Bool("incremental", delta), zap.Time("next_update", crl.NextUpdate))
	return crl, nil
}

// publishTemplateCRL publishes the CRL of iss from every entry of the
// ledger still listed (crlDropBefore), signed as an x509 template.
func (au *Authority) publishTemplateCRL(ctx context.Context, cs signer.CRLSigner, iss signer.IssuerInfo, now time.Time, follow bool,
	audit func(store.CRL) store.AuditEvent) (store.CRL, error) {
	return au.db.PublishCRLFromAudited(ctx, iss.KeyID, iss.NameID, now, crlDropBefore(now), nil, func(r store.CRLRead) ([]byte, time.Time, time.Time, error) {
		this, next := crlTimes(now)
		if err := checkFollows(r, now, follow); err != nil {
			return nil, this, next, err
		}
		tmpl := &x509.RevocationList{Number: big.NewInt(r.Number), ThisUpdate: this, NextUpdate: next,
			RevokedCertificateEntries: make([]x509.RevocationListEntry, 0, len(r.Entries))}
		for _, e := range r.Entries {
			entry, err := crlEntry(e, this)
			if err != nil {
				return nil, this, next, err
			}
			tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, entry)
		}
		der, err := cs.SignCRL(ctx, iss.KeyID, tmpl)
		return der, this, next, err
	}, audit)
}

// crlDropBefore is when the certificate of an entry left off a CRL
// built at now expired at the latest (see CRLKeepsExpired).
func crlDropBefore(now time.Time) time.Time { return now.Add(-CRLKeepsExpired) }

// crlTimes are the thisUpdate and nextUpdate of a CRL built at now.
func crlTimes(now time.Time) (this, next time.Time) {
	this = now.UTC().Truncate(time.Second)
	return this, this.Add(CRLValidity)
}

// crlEntry is the CRL entry of a ledger row on a CRL whose thisUpdate is
// this.
func crlEntry(e store.CRLEntry, this time.Time) (x509.RevocationListEntry, error) {
	n, ok := new(big.Int).SetString(e.Serial, 16)
	if !ok {
		return x509.RevocationListEntry{}, fmt.Errorf("ledger serial %q is not hex", e.Serial)
	}
	// The revocation's time is the clock of the instance that recorded
	// it; this CRL's, of the instance building it, may run behind. A CRL
	// does not say a certificate was revoked after the CRL was issued
	// (RFC 5280 §5.1.2.4, §5.1.2.6): revoked by its thisUpdate, then.
	at := e.RevokedAt.UTC().Truncate(time.Second)
	if at.After(this) {
		at = this
	}
	// unspecified (0) is left out, as RFC 5280 §5.3.1 asks, and so is
	// removeFromCRL (see crlReason).
	return x509.RevocationListEntry{SerialNumber: n, RevocationTime: at, ReasonCode: crlReason(e.Reason)}, nil
}

// knownIssuer describes the CA with key id keyID if the profile's signer
// holds it; the error wraps signer.ErrIssuerUnknown when it does not.
func (au *Authority) knownIssuer(ctx context.Context, keyID string) (signer.IssuerInfo, error) {
	cs, ok := au.CRLSigner()
	if !ok {
		return signer.IssuerInfo{}, fmt.Errorf("%w: the signer of profile %s publishes no CRL", signer.ErrIssuerUnknown, au.cfg.Profile)
	}
	return cs.LookupCRLIssuer(ctx, keyID)
}

// RefreshCRLs queues a regeneration for each CA a mounted profile holds —
// the one it issues from and each earlier one until it expires — whose
// CRL is missing, stale (the ledger has revocations it lacks: a crash
// between a revocation and its CRL) or older than a third of its
// validity, so a CRL is replaced well before its nextUpdate even when
// nothing was revoked.
func RefreshCRLs(ctx context.Context, authorities []*Authority) error {
	var (
		errs      []error
		stale     map[string]bool
		staleRead bool
		seen      = map[string]bool{}
	)
	for _, au := range authorities {
		cs, ok := au.CRLSigner()
		if !ok {
			continue
		}
		issuers, err := cs.CRLIssuers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("profile %s: %w", au.cfg.Profile, err))
		}
		for _, iss := range issuers {
			if seen[iss.KeyID] {
				continue
			}
			seen[iss.KeyID] = true
			if !staleRead {
				ids, err := au.db.StaleCRLIssuers(ctx)
				if err != nil {
					return err
				}
				stale, staleRead = map[string]bool{}, true
				for _, id := range ids {
					stale[id] = true
				}
			}
			crl, err := au.db.GetCRLInfo(ctx, iss.KeyID)
			switch {
			case errors.Is(err, store.ErrNotFound), err == nil && (stale[iss.KeyID] || !au.clock.Now().Before(crl.ThisUpdate.Add(CRLRefreshAge))):
				if err := au.queueCRL(ctx, iss, false); err != nil {
					errs = append(errs, err)
				}
			case err != nil:
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// runCRL does one attempt of a crl_regenerate job for iss, a CA this
// profile's signer holds; jobIssuer is the key id the job names.
func (au *Authority) runCRL(ctx context.Context, iss signer.IssuerInfo, jobIssuer string) jobs.Outcome {
	// A client that revalidates with If-Modified-Since alone tells CRLs
	// apart by their Last-Modified, the thisUpdate to the second: one
	// built in the second of the CRL stored (by another instance, whose
	// last build this server's coalescing does not know) would be
	// answered 304 to a client holding that one, which would keep a CRL
	// without the revocations this one adds. So it waits for the next
	// second — unless the stored one is further ahead than the clocks of
	// instances differ by (crlSameSecondWait): then it is built now.
	if cur, err := au.db.GetCRLInfo(ctx, iss.KeyID); err == nil {
		if wait := crlSecondWait(cur, au.clock.Now()); wait > 0 {
			return jobs.RetryAfter(fmt.Sprintf("CRL %d has the thisUpdate of this second", cur.Number), wait)
		}
	}
	crl, err := au.publishCRL(ctx, iss, true, nil)
	if soon := (*crlTooSoonError)(nil); errors.As(err, &soon) {
		return jobs.RetryAfter(soon.Error(), soon.wait)
	}
	if errors.Is(err, signer.ErrIssuerRetired) || errors.Is(err, signer.ErrIssuerUnknown) {
		return jobs.Failed(err.Error())
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	// A revocation committed after the CRL's ledger was read: build
	// again, CRLCoalesce after this build began, so that those arriving
	// until then share it. (One whose regeneration request found this job
	// running has it run again anyway, jobs.Spec.Rerun; this check alone
	// misses one committed after it and requested before the attempt is
	// recorded.)
	if stale, err := au.db.StaleCRLIssuers(ctx); err == nil {
		for _, id := range stale {
			if id == jobIssuer {
				wait := max(au.crls.nextStart(iss.KeyID).Sub(au.clock.Now()), 0)
				return jobs.RetryAfter(fmt.Sprintf("revocations arrived after CRL %d was built", crl.Number), wait)
			}
		}
	}
	return jobs.Done()
}

// queueStaleCRLs queues a regeneration for every CA one of authorities
// holds whose CRL lacks revocations of the ledger.
func queueStaleCRLs(ctx context.Context, authorities []*Authority) error {
	if len(authorities) == 0 {
		return nil
	}
	stale, err := authorities[0].db.StaleCRLIssuers(ctx)
	if err != nil || len(stale) == 0 {
		return err
	}
	var errs []error
	for _, id := range stale {
		for _, au := range authorities {
			iss, err := au.knownIssuer(ctx, id)
			if err != nil {
				continue
			}
			if err := au.queueCRL(ctx, iss, false); err != nil {
				errs = append(errs, err)
			}
			break
		}
	}
	return errors.Join(errs...)
}
