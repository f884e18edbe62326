package acmeproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
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
	// it.
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
// (RFC 5280 §5), cacheable until its nextUpdate.
func (s *Server) handleCRL(w http.ResponseWriter, r *http.Request) error {
	crl, err := s.CurrentCRL(r.Context())
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

// CurrentCRL returns the latest CRL of the CA the profile issues from now,
// from memory, rechecking the store every few seconds for one another
// instance published. With none published yet it queues one and returns
// an error wrapping errNoCRL.
func (s *Server) CurrentCRL(ctx context.Context) (store.CRL, error) {
	cs, ok := s.crlSigner()
	if !ok {
		return store.CRL{}, problem.NotFound("CRL")
	}
	issuer, err := cs.CRLIssuer(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	now := s.clock.Now()
	if e, ok := s.crls.get(issuer); ok && now.Sub(e.checked) < crlRecheck && now.Before(e.crl.NextUpdate) {
		return e.crl, nil
	}
	crl, err := s.db.GetCRL(ctx, issuer)
	if errors.Is(err, store.ErrNotFound) {
		if qerr := s.queueCRL(ctx, issuer); qerr != nil {
			return store.CRL{}, qerr
		}
		return store.CRL{}, fmt.Errorf("%w (issuer %s)", errNoCRL, issuer)
	}
	if err != nil {
		return store.CRL{}, err
	}
	if !now.Before(crl.NextUpdate) {
		// Past its nextUpdate: still the best there is, but get a new one.
		if qerr := s.queueCRL(ctx, issuer); qerr != nil {
			s.log.Error("queueing a CRL regeneration", zap.String("event", "crl_queue_failed"), zap.Error(qerr))
		}
	}
	s.crls.put(crl, now)
	e, _ := s.crls.get(issuer)
	return e.crl, nil
}

// crlPayload is a crl_regenerate job's payload.
type crlPayload struct {
	Profile string `json:"profile"`
	Issuer  string `json:"issuer"`
}

// queueCRL queues the regeneration of an issuer's CRL.
func (s *Server) queueCRL(ctx context.Context, issuer string) error {
	_, _, err := s.queue.Enqueue(context.WithoutCancel(ctx), jobs.Spec{
		Kind: CRLRegenerateKind, Key: issuer, Payload: crlPayload{Profile: s.cfg.Profile, Issuer: issuer},
		MaxAttempts: crlMaxAttempts,
	})
	return err
}

// RegenerateCRL publishes a new CRL for the CA the profile issues from
// now, and returns it.
func (s *Server) RegenerateCRL(ctx context.Context) (store.CRL, error) {
	cs, ok := s.crlSigner()
	if !ok {
		return store.CRL{}, fmt.Errorf("%w: the signer of profile %s publishes no CRL", store.ErrNotFound, s.cfg.Profile)
	}
	issuer, err := cs.CRLIssuer(ctx)
	if err != nil {
		return store.CRL{}, err
	}
	return s.publishCRL(ctx, issuer)
}

// publishCRL builds, signs and stores a new CRL of issuer from the ledger.
func (s *Server) publishCRL(ctx context.Context, issuer string) (store.CRL, error) {
	cs, ok := s.crlSigner()
	if !ok {
		return store.CRL{}, fmt.Errorf("the signer of profile %s publishes no CRL", s.cfg.Profile)
	}
	now := s.clock.Now()
	// Until signers name their CAs, each key is its own name.
	crl, err := s.db.PublishCRL(ctx, issuer, issuer, now, func(number int64, entries []store.CRLEntry) ([]byte, time.Time, time.Time, error) {
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
		der, err := cs.SignCRL(ctx, issuer, tmpl)
		return der, this, next, err
	})
	if err != nil {
		return store.CRL{}, err
	}
	s.crls.put(crl, now)
	s.log.Info("CRL published", zap.String("event", "crl_published"), zap.String("profile", s.cfg.Profile),
		zap.String("issuer", issuer), zap.Int64("number", crl.Number), zap.Int("entries", crl.Entries),
		zap.Time("next_update", crl.NextUpdate))
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
	s := h.serverFor(ctx, p)
	if s == nil {
		return jobs.RetryAfter("no profile mounted in this process issues from CA "+p.Issuer, notMountedDelay)
	}
	crl, err := s.publishCRL(ctx, p.Issuer)
	if errors.Is(err, signer.ErrIssuerRetired) {
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

// serverFor finds a mounted profile issuing from the job's CA: the one
// that queued it, or any other.
func (h *CRLJobs) serverFor(ctx context.Context, p crlPayload) *Server {
	if s, ok := h.Profiles.Lookup(p.Profile); ok && issuesFrom(ctx, s, p.Issuer) {
		return s
	}
	if h.Servers == nil {
		return nil
	}
	for _, s := range h.Servers() {
		if issuesFrom(ctx, s, p.Issuer) {
			return s
		}
	}
	return nil
}

func issuesFrom(ctx context.Context, s *Server, issuer string) bool {
	cs, ok := s.crlSigner()
	if !ok {
		return false
	}
	id, err := cs.CRLIssuer(ctx)
	return err == nil && id == issuer
}

// Recover implements jobs.Handler: it queues a regeneration for every CA
// a mounted profile issues from whose CRL lacks revocations of the ledger,
// as a crash between a revocation and its job leaves it.
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
	for _, s := range servers {
		cs, ok := s.crlSigner()
		if !ok {
			continue
		}
		issuer, err := cs.CRLIssuer(ctx)
		if err != nil || !slices.Contains(stale, issuer) {
			continue
		}
		if err := s.queueCRL(ctx, issuer); err != nil {
			errs = append(errs, err)
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

// RefreshCRLs queues a regeneration for each mounted profile's CA whose
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
		issuer, err := cs.CRLIssuer(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("profile %s: %w", s.cfg.Profile, err))
			continue
		}
		if seen[issuer] {
			continue
		}
		seen[issuer] = true
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
		crl, err := s.db.GetCRL(ctx, issuer)
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && (stale[issuer] || !s.clock.Now().Before(crl.ThisUpdate.Add(crlRefreshAge))):
			if err := s.queueCRL(ctx, issuer); err != nil {
				errs = append(errs, err)
			}
		case err != nil:
			errs = append(errs, err)
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
