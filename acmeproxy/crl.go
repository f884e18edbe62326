package acmeproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

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
	// crlRefreshAge is how old a CRL may get before the refresh replaces
	// it even when nothing was revoked: two thirds of its validity early.
	crlRefreshAge = CRLValidity / 3
	// CRLRefreshEvery is how often the refresh runs.
	CRLRefreshEvery = time.Minute
	// crlRecheck is how long the served CRL is taken from memory before
	// the store is asked whether another instance published a newer one.
	crlRecheck = 5 * time.Second
	// crlMaxAttempts is a crl_regenerate job's attempt budget.
	crlMaxAttempts = 12
)

// errNoCRL: no CRL has been published for the issuer yet.
var errNoCRL = errors.New("no CRL has been published for this CA yet")

// crlCache keeps the CRLs a server publishes or serves, by issuer.
type crlCache struct {
	mu sync.Mutex
	m  map[string]cachedCRL
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
	if old, ok := c.m[crl.IssuerKeyID]; ok && old.crl.Number > crl.Number {
		old.checked = now
		c.m[crl.IssuerKeyID] = old
		return
	}
	c.m[crl.IssuerKeyID] = cachedCRL{crl: crl, checked: now}
}

// crlSigner is the profile's signer as a CRL signer, if it is one.
func (s *Server) crlSigner() (signer.CRLSigner, bool) {
	cs, ok := s.signer.(signer.CRLSigner)
	return cs, ok
}

// handleCRL serves the CRL of the CA the profile issues from now, DER
// (RFC 5280 §5), cacheable until its nextUpdate. It is where leaves issued
// before leaves named their CA's own CRL point.
func (s *Server) handleCRL(w http.ResponseWriter, r *http.Request) error {
	iss, err := s.currentIssuer(r.Context())
	if err != nil {
		return err
	}
	return s.serveCRL(w, r, iss)
}

// handleIssuerCRL serves the CRL of one CA the profile has issued from, by
// its key id: <prefix>/crl/<key id>, the distribution point in the leaves
// that CA signed, served until its certificate (and so every leaf it
// signed) expires, also once another CA issues.
func (s *Server) handleIssuerCRL(w http.ResponseWriter, r *http.Request, keyID string) error {
	cs, ok := s.crlSigner()
	if !ok {
		return problem.NotFound("CRL")
	}
	iss, err := cs.LookupCRLIssuer(r.Context(), keyID)
	if errors.Is(err, signer.ErrIssuerUnknown) {
		return problem.NotFound("CRL")
	}
	if err != nil {
		return err
	}
	return s.serveCRL(w, r, iss)
}

func (s *Server) serveCRL(w http.ResponseWriter, r *http.Request, iss signer.IssuerInfo) error {
	crl, err := s.issuerCRL(r.Context(), iss)
	if errors.Is(err, errNoCRL) {
		w.Header().Set("Retry-After", "5")
		return problem.Unavailable("the CRL is being generated; retry shortly")
	}
	if err != nil {
		return err
	}
	now := s.clock.Now()
	h := w.Header()
	h.Set("Content-Type", "application/pkix-crl")
	h.Set("Content-Length", strconv.Itoa(len(crl.DER)))
	h.Set("Last-Modified", crl.ThisUpdate.UTC().Format(http.TimeFormat))
	h.Set("Expires", crl.NextUpdate.UTC().Format(http.TimeFormat))
	maxAge := max(int(crl.NextUpdate.Sub(now)/time.Second), 0)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(maxAge))
	h.Del("Replay-Nonce")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(crl.DER)
	}
	return nil
}

// currentIssuer describes the CA the profile issues from now.
func (s *Server) currentIssuer(ctx context.Context) (signer.IssuerInfo, error) {
	cs, ok := s.crlSigner()
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
// as issuerCRL does.
func (s *Server) CurrentCRL(ctx context.Context) (store.CRL, error) {
	iss, err := s.currentIssuer(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	return s.issuerCRL(ctx, iss)
}

// issuerCRL returns the latest CRL of iss, from memory, rechecking the
// store every few seconds for one another instance published. With none
// published yet it queues one and returns an error wrapping errNoCRL; for
// a CA past its notAfter nothing is queued any more.
func (s *Server) issuerCRL(ctx context.Context, iss signer.IssuerInfo) (store.CRL, error) {
	now := s.clock.Now()
	if e, ok := s.crls.get(iss.KeyID); ok && now.Sub(e.checked) < crlRecheck && now.Before(e.crl.NextUpdate) {
		return e.crl, nil
	}
	crl, err := s.db.GetCRL(ctx, iss.KeyID)
	if errors.Is(err, store.ErrNotFound) {
		if !now.Before(iss.NotAfter) {
			return store.CRL{}, problem.NotFound("CRL")
		}
		if qerr := s.queueCRL(ctx, iss); qerr != nil {
			return store.CRL{}, qerr
		}
		return store.CRL{}, fmt.Errorf("%w (issuer %s)", errNoCRL, iss.KeyID)
	}
	if err != nil {
		return store.CRL{}, err
	}
	if !now.Before(crl.NextUpdate) {
		// Past its nextUpdate: still the best there is, but get a new one.
		if qerr := s.queueCRL(ctx, iss); qerr != nil {
			s.log.Error("queueing a CRL regeneration", zap.String("event", "crl_queue_failed"), zap.Error(qerr))
		}
	}
	s.crls.put(crl, now)
	e, _ := s.crls.get(iss.KeyID)
	return e.crl, nil
}

// crlPayload is a crl_regenerate job's payload.
type crlPayload struct {
	Profile string `json:"profile"`
	Issuer  string `json:"issuer"`
}

// queueCRL queues the regeneration of an issuer's CRL. The job's deadline
// is the CA's notAfter: past it no leaf of the CA is valid, and a job
// still waiting (for a profile to mount it, for its key) is retired
// instead of retried forever. For a CA past it nothing is queued.
func (s *Server) queueCRL(ctx context.Context, iss signer.IssuerInfo) error {
	if !s.clock.Now().Before(iss.NotAfter) {
		return nil
	}
	_, _, err := s.queue.Enqueue(context.WithoutCancel(ctx), jobs.Spec{
		Kind: CRLRegenerateKind, Key: iss.KeyID, Payload: crlPayload{Profile: s.cfg.Profile, Issuer: iss.KeyID},
		Deadline: iss.NotAfter, MaxAttempts: crlMaxAttempts,
	})
	return err
}

// RegenerateCRL publishes a new CRL for the CA the profile issues from
// now, and returns it.
func (s *Server) RegenerateCRL(ctx context.Context) (store.CRL, error) {
	if _, ok := s.crlSigner(); !ok {
		return store.CRL{}, fmt.Errorf("%w: the signer of profile %s publishes no CRL", store.ErrNotFound, s.cfg.Profile)
	}
	iss, err := s.currentIssuer(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	return s.publishCRL(ctx, iss)
}

// publishCRL builds, signs and stores a new CRL of iss from the ledger,
// numbered in the sequence of the CA's name.
func (s *Server) publishCRL(ctx context.Context, iss signer.IssuerInfo) (store.CRL, error) {
	cs, ok := s.crlSigner()
	if !ok {
		return store.CRL{}, fmt.Errorf("the signer of profile %s publishes no CRL", s.cfg.Profile)
	}
	now := s.clock.Now()
	crl, err := s.db.PublishCRL(ctx, iss.KeyID, iss.NameID, now, func(number int64, entries []store.CRLEntry) ([]byte, time.Time, time.Time, error) {
		this := now.UTC().Truncate(time.Second)
		next := this.Add(CRLValidity)
		tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: this, NextUpdate: next}
		for _, e := range entries {
			n, ok := new(big.Int).SetString(e.Serial, 16)
			if !ok {
				return nil, this, next, fmt.Errorf("ledger serial %q is not hex", e.Serial)
			}
			entry := x509.RevocationListEntry{SerialNumber: n, RevocationTime: e.RevokedAt.UTC().Truncate(time.Second)}
			// unspecified (0) is left out, as RFC 5280 §5.3.1 asks, and
			// so is removeFromCRL (see crlReason).
			entry.ReasonCode = crlReason(e.Reason)
			tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, entry)
		}
		der, err := cs.SignCRL(ctx, iss.KeyID, tmpl)
		return der, this, next, err
	})
	if err != nil {
		return store.CRL{}, err
	}
	s.crls.put(crl, now)
	s.log.Info("CRL published", zap.String("event", "crl_published"), zap.String("profile", s.cfg.Profile),
		zap.String("issuer", iss.KeyID), zap.String("issuer_name", iss.Subject), zap.Int64("number", crl.Number),
		zap.Int("entries", crl.Entries), zap.Time("next_update", crl.NextUpdate))
	return crl, nil
}

// CRLJobs runs crl_regenerate jobs, each with the signer of a mounted
// profile that issues from the job's CA.
type CRLJobs struct {
	Profiles Profiles
	// Servers lists the mounted profiles, to find another that issues
	// from the CA when the one that queued the job is gone.
	Servers func() []*Server
	Logger  *zap.Logger
}

// Kind implements jobs.Handler.
func (h *CRLJobs) Kind() string { return CRLRegenerateKind }

// Run implements jobs.Handler.
func (h *CRLJobs) Run(ctx context.Context, job *jobs.Job) jobs.Outcome {
	var p crlPayload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	s, iss, err := h.serverFor(ctx, p)
	switch {
	case errors.Is(err, signer.ErrIssuerUnknown):
		// Profiles mounted here served it and know nothing of the CA:
		// no later attempt can sign its CRL.
		return jobs.Failed(err.Error())
	case err != nil:
		return jobs.Retry(err.Error())
	case s == nil:
		return jobs.RetryAfter("no profile mounted in this process issues from CA "+p.Issuer, notMountedDelay)
	}
	crl, err := s.publishCRL(ctx, iss)
	if errors.Is(err, signer.ErrIssuerRetired) || errors.Is(err, signer.ErrIssuerUnknown) {
		return jobs.Failed(err.Error())
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	// A revocation committed after the CRL was built found this job
	// running and did not queue another: build again.
	if stale, err := s.db.StaleCRLIssuers(ctx); err == nil {
		for _, id := range stale {
			if id == p.Issuer {
				return jobs.RetryAfter(fmt.Sprintf("revocations arrived after CRL %d was built", crl.Number), 0)
			}
		}
	}
	return jobs.Done()
}

// serverFor finds a mounted profile whose signer holds the job's CA: the
// one that queued it, or any other. With none, the error wraps
// signer.ErrIssuerUnknown when the profile that queued the job is mounted
// here (its signer has no record of the CA), signer.ErrIssuerUnavailable
// when a signer could not read its records; a nil server and error say
// the profile is not mounted in this process.
func (h *CRLJobs) serverFor(ctx context.Context, p crlPayload) (*Server, signer.IssuerInfo, error) {
	var candidates []*Server
	own, mounted := h.Profiles.Lookup(p.Profile)
	if mounted {
		candidates = append(candidates, own)
	}
	if h.Servers != nil {
		candidates = append(candidates, h.Servers()...)
	}
	var unavailable error
	for _, s := range candidates {
		iss, err := s.knownIssuer(ctx, p.Issuer)
		switch {
		case err == nil:
			return s, iss, nil
		case !errors.Is(err, signer.ErrIssuerUnknown) && unavailable == nil:
			unavailable = err
		}
	}
	switch {
	case unavailable != nil:
		return nil, signer.IssuerInfo{}, unavailable
	case mounted:
		return nil, signer.IssuerInfo{}, fmt.Errorf("%w: profile %s has no record of CA %s", signer.ErrIssuerUnknown, p.Profile, p.Issuer)
	}
	return nil, signer.IssuerInfo{}, nil
}

// knownIssuer describes the CA with key id keyID if the profile's signer
// holds it; the error wraps signer.ErrIssuerUnknown when it does not.
func (s *Server) knownIssuer(ctx context.Context, keyID string) (signer.IssuerInfo, error) {
	cs, ok := s.crlSigner()
	if !ok {
		return signer.IssuerInfo{}, fmt.Errorf("%w: the signer of profile %s publishes no CRL", signer.ErrIssuerUnknown, s.cfg.Profile)
	}
	return cs.LookupCRLIssuer(ctx, keyID)
}

// Recover implements jobs.Handler: it queues a regeneration for every CA
// a mounted profile holds whose CRL lacks revocations of the ledger, as a
// crash between a revocation and its job leaves it.
func (h *CRLJobs) Recover(ctx context.Context, _ *jobs.Queue) error {
	if h.Servers == nil {
		return nil
	}
	servers := h.Servers()
	if len(servers) == 0 {
		return nil
	}
	stale, err := servers[0].db.StaleCRLIssuers(ctx)
	if err != nil || len(stale) == 0 {
		return err
	}
	var errs []error
	for _, id := range stale {
		for _, s := range servers {
			iss, err := s.knownIssuer(ctx, id)
			if err != nil {
				continue
			}
			if err := s.queueCRL(ctx, iss); err != nil {
				errs = append(errs, err)
			}
			break
		}
	}
	return errors.Join(errs...)
}

// Abandon implements jobs.Handler.
func (h *CRLJobs) Abandon(_ context.Context, job *jobs.Job, reason string) {
	if h.Logger != nil {
		h.Logger.Error("CRL regeneration abandoned", zap.String("event", "crl_abandoned"),
			zap.String("key", job.Key), zap.Int64("job", job.ID), zap.String("reason", reason))
	}
}

// RefreshCRLs queues a regeneration for each CA a mounted profile holds —
// the one it issues from and each earlier one until it expires — whose
// CRL is missing, stale (the ledger has revocations it lacks: a crash
// between a revocation and its CRL) or older than a third of its
// validity, so a CRL is replaced well before its nextUpdate even when
// nothing was revoked.
func RefreshCRLs(ctx context.Context, servers []*Server) error {
	var (
		errs      []error
		stale     map[string]bool
		staleRead bool
		seen      = map[string]bool{}
	)
	for _, s := range servers {
		cs, ok := s.crlSigner()
		if !ok {
			continue
		}
		issuers, err := cs.CRLIssuers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("profile %s: %w", s.cfg.Profile, err))
		}
		for _, iss := range issuers {
			if seen[iss.KeyID] {
				continue
			}
			seen[iss.KeyID] = true
			if !staleRead {
				ids, err := s.db.StaleCRLIssuers(ctx)
				if err != nil {
					return err
				}
				stale, staleRead = map[string]bool{}, true
				for _, id := range ids {
					stale[id] = true
				}
			}
			crl, err := s.db.GetCRL(ctx, iss.KeyID)
			switch {
			case errors.Is(err, store.ErrNotFound), err == nil && (stale[iss.KeyID] || !s.clock.Now().Before(crl.ThisUpdate.Add(crlRefreshAge))):
				if err := s.queueCRL(ctx, iss); err != nil {
					errs = append(errs, err)
				}
			case err != nil:
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RevocationJobHandlers are the job handlers of revocation and CRL
// publishing for a runner: signer_revoke, crl_regenerate and the periodic
// crl_refresh. servers lists the mounted profiles when called.
func RevocationJobHandlers(profiles Profiles, servers func() []*Server, logger *zap.Logger) []jobs.Handler {
	if logger == nil {
		logger = zap.NewNop()
	}
	return []jobs.Handler{
		&RevokeJobs{Profiles: profiles, Logger: logger},
		&CRLJobs{Profiles: profiles, Servers: servers, Logger: logger},
		&jobs.Periodic{Name: CRLRefreshKind, Every: CRLRefreshEvery, Do: func(ctx context.Context) error {
			return RefreshCRLs(ctx, servers())
		}},
	}
}
