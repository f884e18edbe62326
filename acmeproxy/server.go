// Package acmeproxy is the ACME (RFC 8555) server's HTTP front: one Server
// per profile, serving the directory, nonces, accounts, orders,
// authorizations, challenges, finalize and certificate download. It routes,
// checks the JWS and nonce, renders, and leaves the rest to the profile's
// authority (package authority). It knows nothing about Caddy; the root
// package mounts a Server in a handler and runs the authority's jobs in
// the app's runner.
package acmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/internal/forwarded"
	"github.com/acmeproxy/caddy-acme-proxy/internal/logevery"
	"github.com/acmeproxy/caddy-acme-proxy/internal/warmstack"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Options are a Server's collaborators: its authority's.
type Options = authority.Options

// Server is the HTTP front of one profile: routes, the JWS and nonce
// step, and rendering. What a request asks for is done by the profile's
// authority.
type Server struct {
	cfg     ProfileConfig
	core    *authority.Authority
	db      *store.DB
	clock   clock.Clock
	log     *zap.Logger
	nonces  *nonces
	kidKeys kidKeyCache // see kidKeyCache

	metrics   authority.Metrics
	storeDown logevery.Limiter // see answerStoreUnavailable
	mux       *http.ServeMux   // see newMux
	deadline  time.Duration    // Options.RequestDeadline
	// started is set by Start, once the nonces' key is read: before it
	// the server answers 503 (errNotStarted).
	started atomic.Bool
}

// errNotStarted is what a request to a server not started yet is
// answered with: the store is not open, so 503 and Retry-After.
var errNotStarted = fmt.Errorf("%w: %w: the profile's server has not started", store.ErrUnavailable, store.ErrNotOpen)

// NewServer checks cfg (defaults applied), builds the profile's server
// (PrepareServer) and starts it (Start) on the open store of opts.
func NewServer(ctx context.Context, cfg ProfileConfig, opts Options) (*Server, error) {
	s, err := PrepareServer(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// PrepareServer checks cfg (defaults applied) and builds the profile's
// server without touching the store, which need not be open yet (see
// store.DB): a configuration is checked (caddy validate) without writing
// to the database. The server serves once Start has read its keys.
func PrepareServer(cfg ProfileConfig, opts Options) (*Server, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = authority.NopMetrics{}
	}
	if opts.RequestDeadline <= 0 {
		opts.RequestDeadline = authority.DefaultRequestDeadline
	}
	if err := cfg.caaChecker(&opts); err != nil {
		return nil, err
	}
	core, err := authority.New(authority.Config{
		Profile: cfg.Profile, Prefix: cfg.Prefix, Challenges: cfg.Challenges, CRLURL: cfg.CRLURL, EAB: cfg.EAB, Policy: newPolicy(cfg.Allow, cfg.Deny).check,
		CertificateProfiles: cfg.authorityProfiles(), DefaultCertificateProfile: cfg.DefaultCertificateProfile,
		Renewal: cfg.RenewalInfo.authority(),
		Limits:  cfg.Limits.Resolve(),
	}, opts)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, core: core, db: opts.DB, clock: opts.Clock, log: opts.Logger,
		nonces: &nonces{db: opts.DB},

		metrics:   opts.Metrics,
		storeDown: logevery.Limiter{Every: storeLogEvery},
		deadline:  opts.RequestDeadline,
	}
	s.mux = s.newMux()
	return s, nil
}

// Start reads the key the profile's nonces are signed with, which every
// instance on the store shares (the first start of a store creates it):
// the store must be open. Until Start the server answers every request
// 503. Starting a started server does nothing.
func (s *Server) Start(ctx context.Context) error {
	if s.started.Load() {
		return nil
	}
	key, err := s.db.Secret(ctx, "nonce-hmac", 32, s.clock.Now())
	if err != nil {
		return err
	}
	s.nonces.key = key
	s.started.Store(true)
	return nil
}

// Authority is the profile's core, which job handlers and operators use.
func (s *Server) Authority() *authority.Authority { return s.core }

// Profile is the profile's name.
func (s *Server) Profile() string { return s.cfg.Profile }

// Prefix is the path the profile is served under.
func (s *Server) Prefix() string { return s.cfg.Prefix }

// Handles reports whether a request path belongs to this profile.
func (s *Server) Handles(path string) bool {
	return path == s.cfg.Prefix || strings.HasPrefix(path, s.cfg.Prefix+"/")
}

// baseURL is the profile's absolute URL as this request reached it.
func (s *Server) baseURL(r *http.Request) string {
	return forwarded.Scheme(r) + "://" + r.Host + s.cfg.Prefix
}

// requestURL is the absolute URL the request was sent to, which a JWS
// "url" must equal (RFC 8555 §6.4).
func (s *Server) requestURL(r *http.Request) string {
	u := forwarded.Scheme(r) + "://" + r.Host + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	return u
}

// clientIPKey carries a request's client address (WithClientIP).
type clientIPKey struct{}

// WithClientIP tells the Server that the client of the request with ctx
// is ip, when that is not the connection's peer: a trusted proxy's
// request, whose client the HTTP server in front (Caddy's
// trusted_proxies) took from its headers. Limits per address, the
// refusal tallies and the audit rows then count the client, not the
// proxy every client shares.
func WithClientIP(ctx context.Context, ip string) context.Context {
	return context.WithValue(ctx, clientIPKey{}, ip)
}

// clientIP is the address the request came from: the one WithClientIP
// gave, else the connection's peer (without the port).
func clientIP(r *http.Request) string {
	if ip, ok := r.Context().Value(clientIPKey{}).(string); ok {
		return ip
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// clientOf describes r's client for the authority's audit rows, its user
// agent clipped to the audit row's bound: a client carries it into job
// payloads and the relay's mapping before any row is written.
func clientOf(r *http.Request) authority.Client {
	if r == nil {
		return authority.Client{}
	}
	return authority.Client{IP: clientIP(r), UserAgent: store.Clip(r.UserAgent(), store.AuditFieldMax)}
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP routes a request under the profile's prefix. Every response
// carries a fresh Replay-Nonce, the directory Link and Cache-Control:
// no-store (RFC 8555 §6.5, §7.1, §7.2), but for the public answers a
// cache may keep (ca.pem, the CRLs, renewalInfo), which set their own
// Cache-Control and drop the nonce.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	handlerStacks.Run(func() { s.serveHTTP(w, r) })
}

// handlerStacks runs every profile's requests on goroutines whose stacks
// an earlier request has grown (see package warmstack).
var handlerStacks warmstack.Pool

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if _, nop := s.metrics.(authority.NopMetrics); !nop {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, route: "other"}
		defer func() { s.metrics.Request(s.cfg.Profile, sw.route, sw.status, time.Since(start)) }()
		w = sw
	}
	if !s.started.Load() {
		s.writeError(w, r, errNotStarted)
		return
	}
	h := w.Header()
	h.Set("Replay-Nonce", s.nonces.mint(s.cfg.Profile, s.clock.Now()))
	h.Add("Link", link(s.baseURL(r)+"/directory", "index"))
	h.Set("Cache-Control", "no-store")
	ctx, cancel := context.WithTimeout(r.Context(), s.deadline)
	defer cancel()
	if !canonicalPath(r.URL.EscapedPath()) {
		// ServeMux would answer with a redirect to the cleaned path, and a
		// client following it would repeat a JWS whose "url" names the
		// path it left. Such a path names no resource.
		s.serveRoute("other", func(http.ResponseWriter, *http.Request) error {
			return problem.NotFound("resource")
		}).ServeHTTP(w, r.WithContext(ctx))
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(ctx))
}

// canonicalPath reports whether p, a path below the prefix, is as
// http.ServeMux would leave it: no empty segment, "." or "..", a trailing
// slash kept.
func canonicalPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	route  string // the matched route's name, for metrics
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	getHead = []string{http.MethodGet, http.MethodHead}
	post    = []string{http.MethodPost}
	// getHeadPost is for the directory and new-nonce, which a server MUST
	// also answer as POST-as-GET (RFC 8555 §6.3).
	getHeadPost = []string{http.MethodGet, http.MethodHead, http.MethodPost}
)

// route is one resource of the profile: its path below the prefix as an
// http.ServeMux pattern, the methods it answers, its name in metrics (a
// fixed name, never a resource id) and its handler. routes is the one
// table the mux, the 405 answers and the metrics labels come from.
type route struct {
	path    string
	methods []string
	name    string
	handle  handlerFunc
}

// withID passes the {id} of the matched pattern to a handler.
func withID(f func(http.ResponseWriter, *http.Request, string) error) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error { return f(w, r, r.PathValue("id")) }
}

func (s *Server) routes() []route {
	return []route{
		{"", getHeadPost, "directory", s.handleDirectory},
		{"/{$}", getHeadPost, "directory", s.handleDirectory},
		{"/directory", getHeadPost, "directory", s.handleDirectory},
		{"/new-nonce", getHeadPost, "new-nonce", s.handleNewNonce},
		{"/new-account", post, "new-account", s.handleNewAccount},
		{"/new-order", post, "new-order", s.handleNewOrder},
		{"/key-change", post, "key-change", s.handleKeyChange},
		{"/revoke-cert", post, "revoke-cert", s.handleRevokeCert},
		{"/ca.pem", getHead, "ca.pem", s.handleCAChain},
		{"/crl", getHead, "crl", s.handleCRL},
		{"/crl/{id}", getHead, "crl", withID(s.handleIssuerCRL)},
		{"/account/{id}", post, "account", withID(s.handleAccount)},
		{"/account/{id}/orders", post, "account/orders", withID(s.handleAccountOrders)},
		{"/order/{id}", post, "order", withID(s.handleOrder)},
		{"/order/{id}/finalize", post, "order/finalize", withID(s.handleFinalize)},
		{"/authz/{id}", post, "authz", withID(s.handleAuthz)},
		{"/chall/{id}", post, "chall", withID(s.handleChallenge)},
		{"/cert/{id}", post, "cert", withID(s.handleCertificate)},
		{"/cert/{id}/{alt}", post, "cert", withID(s.handleAlternateCertificate)},
		{"/renewal-info/{id}", getHead, "renewal-info", withID(s.handleRenewalInfo)},
	}
}

// EndpointSegments are the first path segments below a prefix that a
// profile's endpoints take (directory, order, …), read from its routes:
// another profile mounted at <prefix>/<one of them> ahead of it would
// answer those endpoints in its place.
func EndpointSegments() []string {
	var out []string
	for _, rt := range (&Server{}).routes() {
		seg, _, _ := strings.Cut(strings.TrimPrefix(rt.path, "/"), "/")
		if seg != "" && !strings.HasPrefix(seg, "{") && !slices.Contains(out, seg) {
			out = append(out, seg)
		}
	}
	return out
}

// newMux builds the profile's router from routes: each route under its
// methods ("GET path" answers HEAD too), the same path under any other
// method a 405 problem naming the allowed ones, and anything else below
// the prefix a 404 problem — a client always gets an ACME problem
// document, never the mux's plain-text answers.
func (s *Server) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		path := s.cfg.Prefix + rt.path
		for _, m := range rt.methods {
			if m != http.MethodHead {
				mux.Handle(m+" "+path, s.serveRoute(rt.name, rt.handle))
			}
		}
		allowed, name := strings.Join(rt.methods, ", "), rt.name
		mux.Handle(path, s.serveRoute(rt.name, func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", allowed)
			if name == "renewal-info" {
				// Every renewalInfo answer says when to ask again (RFC
				// 9773 §4.3), a refused method's too: a client that
				// POSTs (as a draft had it) then waits as for a refusal.
				w.Header().Set("Retry-After", strconv.Itoa(int(s.renewalRetryAfter()/time.Second)))
			}
			return problem.MethodNotAllowed()
		}))
	}
	// A path below renewal-info that names no certID is a renewalInfo
	// answer still, with its Retry-After.
	for _, p := range []string{"/renewal-info", "/renewal-info/"} {
		mux.Handle(s.cfg.Prefix+p, s.serveRoute("renewal-info", func(w http.ResponseWriter, _ *http.Request) error {
			w.Header().Set("Retry-After", strconv.Itoa(int(s.renewalRetryAfter()/time.Second)))
			return problem.NotFound("resource")
		}))
	}
	mux.Handle(s.cfg.Prefix+"/", s.serveRoute("other", func(http.ResponseWriter, *http.Request) error {
		return problem.NotFound("resource")
	}))
	return mux
}

// serveRoute runs a route's handler, answering its error, and names the
// route for the request's metrics.
func (s *Server) serveRoute(name string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sw, ok := w.(*statusWriter); ok {
			sw.route = name
		}
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		} else if r.Method == http.MethodPost {
			// A signed request that succeeded spent its nonce: a write
			// went through, so the database is back if it was away.
			s.noteStoreBack()
		}
	})
}

func link(url, rel string) string { return fmt.Sprintf("<%s>;rel=%q", url, rel) }

// writeJSON writes a resource.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.log.Error("encoding response", zap.String("event", "acme_encode_failed"), zap.Error(err))
		status, body = http.StatusInternalServerError, []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError answers with the problem inside err; for a store that cannot
// take writes, or a request past its deadline, with 503 and Retry-After
// (answerStoreUnavailable); for any
// other fault on our side, it logs the cause and answers with a generic
// serverInternal.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p, ok := problem.As(err)
	switch {
	case ok:
	case store.IsUnavailable(err),
		errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil:
		// A request past its deadline has waited on the database (or a
		// backend) that long: as unavailable as one refusing writes.
		p = s.answerStoreUnavailable(w, r, err)
	default:
		s.log.Error("request failed", zap.String("event", "acme_request_failed"),
			zap.String("profile", s.cfg.Profile), zap.String("path", r.URL.Path), zap.Error(err))
		p = problem.Internal()
	}
	if p.Status == 0 {
		p.Status = http.StatusBadRequest
	}
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(problem.RetryAfterSeconds(p.RetryAfter)))
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// ---- directory and nonces ----

type directoryJSON struct {
	NewNonce   string `json:"newNonce"`
	NewAccount string `json:"newAccount"`
	NewOrder   string `json:"newOrder"`
	RevokeCert string `json:"revokeCert"`
	KeyChange  string `json:"keyChange"`
	// RenewalInfo is the base of the renewalInfo resource (RFC 9773 §3).
	RenewalInfo string        `json:"renewalInfo"`
	Meta        directoryMeta `json:"meta"`
}

type directoryMeta struct {
	// TermsOfService and Website are the operator's URLs (RFC 8555
	// §7.1.1), when configured.
	TermsOfService string `json:"termsOfService,omitempty"`
	Website        string `json:"website,omitempty"`
	// CAAIdentities are the issuer domain names CAA records name this
	// profile by (RFC 8555 §7.1.1), when it checks CAA.
	CAAIdentities           []string `json:"caaIdentities,omitempty"`
	ExternalAccountRequired bool     `json:"externalAccountRequired"`
	// Profiles maps certificate profile names to descriptions
	// (draft-ietf-acme-profiles §3).
	Profiles map[string]string `json:"profiles,omitempty"`
}

func (s *Server) handleDirectory(w http.ResponseWriter, r *http.Request) error {
	if err := s.verifyIfPosted(r, "the directory"); err != nil {
		return err
	}
	base := s.baseURL(r)
	s.writeJSON(w, http.StatusOK, directoryJSON{
		NewNonce:    base + "/new-nonce",
		NewAccount:  base + "/new-account",
		NewOrder:    base + "/new-order",
		RevokeCert:  base + "/revoke-cert",
		KeyChange:   base + "/key-change",
		RenewalInfo: base + "/renewal-info",
		Meta: directoryMeta{TermsOfService: s.cfg.TermsOfService, Website: s.cfg.Website,
			ExternalAccountRequired: s.cfg.EAB == authority.EABRequired, Profiles: s.core.CertificateProfiles(), CAAIdentities: s.cfg.caaIdentities()},
	})
	return nil
}

// verifyIfPosted checks a POST to a resource that is read with GET: it
// must be a POST-as-GET (RFC 8555 §6.3), signed by an account of this
// profile like any other, its nonce spent.
func (s *Server) verifyIfPosted(r *http.Request, what string) error {
	if r.Method != http.MethodPost {
		return nil
	}
	req, err := s.verify(r.Context(), r, needKID)
	if err != nil {
		return err
	}
	if !req.postAsGet {
		return problem.MalformedF("%s is read with POST-as-GET (an empty payload)", what)
	}
	return nil
}

// handleNewNonce answers HEAD with 200 and GET with 204 (RFC 8555 §7.2),
// and POST-as-GET as GET; the nonce itself was set by ServeHTTP.
func (s *Server) handleNewNonce(w http.ResponseWriter, r *http.Request) error {
	if err := s.verifyIfPosted(r, "new-nonce"); err != nil {
		return err
	}
	if r.Method != http.MethodHead {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// handleCAChain serves the issuing CA chain, when the signer knows it, so a
// client can bootstrap trust.
func (s *Server) handleCAChain(w http.ResponseWriter, r *http.Request) error {
	chain, ok, err := s.core.CAChain(r.Context())
	switch {
	case err != nil:
		return err
	case !ok:
		return problem.NotFound("CA chain")
	}
	w.Header().Set("Content-Type", "application/pem-certificate-chain")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	// A cached answer must not hand one nonce to many clients.
	w.Header().Del("Replay-Nonce")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(authority.PEMChain(chain))
	return nil
}
