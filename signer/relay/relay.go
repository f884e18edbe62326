// Package relay is the relay signer: it obtains the certificate for a
// finalized order from an upstream ACME CA (Let's Encrypt, ZeroSSL,
// step-ca, Pebble…) with an upstream account of its own, answering the
// upstream's challenges itself and relaying the client's CSR byte for byte.
//
// Finalize answers processing. The work is a durable relay_issue job keyed
// by the local order, with the order's expiry as its deadline; the
// mapping row (local order → upstream order, CSR, client) is what lets a
// restarted process finish it. Each attempt re-reads the upstream order
// and skips what is done, so an attempt may die anywhere and the next
// carries on. Failures are classified by whose answer they are (see
// classify). The job reports through the Settler it was bound with.
package relay

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// IssueKind is the kind of the job that relays one order.
const IssueKind = "relay_issue"

// Defaults of Options.
const (
	DefaultMaxAttempts    = 12
	DefaultAttemptTimeout = 10 * time.Minute
	// DefaultPollInterval is the first wait before an upstream resource
	// is read again; each further wait doubles, up to DefaultMaxPoll. An
	// internal upstream (step-ca, Pebble) settles within milliseconds, a
	// public one within seconds, so the first looks come quickly and the
	// slow case costs a handful of requests more.
	DefaultPollInterval = 500 * time.Microsecond
	DefaultMaxPoll      = 5 * time.Second
	// DefaultFinalizeWait is how long a finalize waits in its request for
	// the relay's first attempt, so that a quick upstream's certificate is
	// in the finalize's answer (valid) rather than a poll later.
	DefaultFinalizeWait = 3 * time.Second
)

// Options configure a Signer.
type Options struct {
	// Directory is the upstream's ACME directory URL. Required.
	Directory string
	// Email is the upstream account's contact, if any.
	Email string
	// EAB, if set, binds the upstream account at registration.
	EAB *acme.EAB
	// Challenge is ChallengeDNS01, ChallengeHTTP01 or ChallengeBypass.
	Challenge string
	// DNS solves dns-01; required with ChallengeDNS01.
	DNS *certmagic.DNS01Solver
	// Storage is Caddy's storage: for http01 the challenges are published
	// there too (for Caddy's own HTTP challenge handler), and an upstream
	// account an earlier version kept there is moved into the store.
	// Required.
	Storage certmagic.Storage
	// HTTPChallengeIssuerKeys returns, for a name, the issuer keys under
	// which the HTTP challenge handler of an instance looks the name's
	// challenge up (see httpPublisher). The upstream's own key is always
	// used as well.
	HTTPChallengeIssuerKeys func(identifier string) []string
	// RootCAs, if set, are the only roots the upstream's TLS certificate
	// may chain to.
	RootCAs *x509.CertPool
	// Transport, if set, replaces the HTTP transport to the upstream
	// (tests); RootCAs is then ignored.
	Transport http.RoundTripper
	// Observe, if set, is told the duration and status code (0: no
	// response) of every request to the upstream, with the profile the
	// signer is bound to (for metrics).
	Observe func(profile string, d time.Duration, status int)
	// PollInterval is the first wait before an upstream authorization or
	// order still in progress is read again, when the upstream does not
	// say (Retry-After); each further wait doubles up to MaxPoll.
	// Defaults DefaultPollInterval and DefaultMaxPoll.
	PollInterval time.Duration
	MaxPoll      time.Duration
	// FinalizeWait bounds how long Issue waits for the relay's first
	// attempt, which it starts at once in this process when it can
	// (DefaultFinalizeWait; negative: never wait, only queue).
	FinalizeWait time.Duration
	// MaxAttempts is a relay's attempt budget (DefaultMaxAttempts).
	MaxAttempts int
	// AttemptTimeout bounds one attempt (DefaultAttemptTimeout).
	AttemptTimeout time.Duration
	// Clock tells the time; default the wall clock.
	Clock clock.Clock
	// PrepareUpstream places the upstream order and answers its
	// challenges as soon as the local order is created, while the client
	// proves its names here, so that a finalize only has the CSR and the
	// certificate left to relay (see prepare.go).
	PrepareUpstream bool
	// Context, if set, is the signer's lifetime (the Caddy config's):
	// once it is done, the preparations under way stop and none starts.
	// Close ends it too, and waits for them.
	Context context.Context
}

// Signer is the relay signer of one profile.
type Signer struct {
	opts Options
	// secrets takes the directory URL's and the EAB key's secrets out of
	// every text the signer logs, returns or stores (secrets.go).
	secrets   secrets
	issuerKey string
	clock     clock.Clock
	transport http.RoundTripper
	http      *httpPublisher
	// upstream is the ACME client every relay attempt shares: one
	// connection pool and one pool of the upstream's nonces, so that an
	// attempt needs no nonce request of its own. Its requests are noted
	// by the recorder of the attempt's context (withRecorder).
	upstream *acme.Client

	mu       sync.Mutex
	bound    signer.Bound // its profile, once bound
	coolTill time.Time    // profile-wide: no upstream request before this (coolDown)
	// offered is what the upstream's directory offers, as read until
	// offerUntil (directory.go).
	offered    upstreamOffer
	offerUntil time.Time
	// nextLook is, per order an attempt here is relaying, when it next
	// reads the upstream (see ExpectedWait).
	nextLook map[string]time.Time
	// preparing holds, per order this process is preparing, a channel
	// closed once the preparation is over; preparations counts them
	// until their goroutines return (Close waits for it).
	preparing    map[string]chan struct{}
	preparations sync.WaitGroup
	// life is done once the signer is closed or its Options.Context is
	// done: no preparation runs past it.
	life    context.Context
	endLife context.CancelFunc
	// issued holds, per order whose finalize waits here for its relay, a
	// channel closed once the order's certificate is recorded (see Issue).
	issued map[string]chan struct{}
	// refusals holds, per order whose attempt the upstream refused for
	// the client's request, the refusal AbandonJob passes to the client
	// (see failure.refusal). A job given up on is abandoned at once by
	// the runner that ran it, in this process — unless its lease lapsed
	// before the attempt returned: then the runner that took the job
	// over runs it again and hears the refusal itself, and the one held
	// here is dropped once its order expired (keepRefusal).
	refusals map[string]heldRefusal
	// afterIssued, if set, runs in an attempt after it announced the
	// certificate recorded (tests: the job's own bookkeeping held back).
	afterIssued func()
	// awaitingPreparation, if set, runs in an attempt about to wait for
	// this process's preparation of its order (tests).
	awaitingPreparation func()
	// awaitingPlacement, if set, runs in an attempt about to wait for
	// another's claim on placing the upstream order of its order (tests).
	awaitingPlacement func()

	acctMu sync.Mutex
	acct   *acme.Account // registered, once loaded

	ari ariCache // the upstream's renewal windows (renewal.go)

	nonces nonceStash // for the relay's own requests (download.go)
}

// OptionError is New's refusal of one of its options, named as the
// relay's configuration names it, so that the Caddy module can say which
// key is wrong.
type OptionError struct {
	Option  string // "directory", "challenge", "dns", "eab"
	Problem string
}

func (e *OptionError) Error() string { return "relay: " + e.Option + ": " + e.Problem }

// New checks opts and returns a Signer. It does not contact the upstream:
// the account is registered by the first relay, so that an unreachable
// upstream never stops Caddy from loading its configuration.
func New(opts Options) (*Signer, error) {
	if problem := directoryProblem(opts.Directory); problem != "" {
		return nil, &OptionError{"directory", problem}
	}
	if opts.Storage == nil {
		return nil, errors.New("relay: no storage for the upstream account")
	}
	// The upstream account's contact is mailto:<email>: anything but one
	// bare address is refused by the upstream at registration, the
	// first relay, rather than at load.
	if e := opts.Email; e != "" {
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
			return nil, &OptionError{"email", fmt.Sprintf("%q is not an e-mail address", e)}
		}
	}
	switch opts.Challenge {
	case ChallengeDNS01:
		if opts.DNS == nil || opts.DNS.DNSProvider == nil {
			return nil, &OptionError{"dns", "challenge dns01 needs a DNS provider"}
		}
		for _, r := range opts.DNS.Resolvers {
			if problem := resolverProblem(r); problem != "" {
				return nil, &OptionError{"resolvers", problem}
			}
		}
	case ChallengeHTTP01, ChallengeBypass:
	default:
		return nil, &OptionError{"challenge", fmt.Sprintf("%q must be dns01, http01 or bypass", opts.Challenge)}
	}
	if opts.EAB != nil {
		if opts.EAB.KeyID == "" {
			return nil, &OptionError{"eab", "the key id is empty"}
		}
		if _, err := base64.RawURLEncoding.DecodeString(opts.EAB.MACKey); err != nil || opts.EAB.MACKey == "" {
			return nil, &OptionError{"eab", "the hmac key must be base64url without padding"}
		}
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = DefaultAttemptTimeout
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxPoll <= 0 {
		opts.MaxPoll = DefaultMaxPoll
	}
	opts.MaxPoll = max(opts.MaxPoll, opts.PollInterval)
	if opts.FinalizeWait == 0 {
		opts.FinalizeWait = DefaultFinalizeWait
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	macKey := ""
	if opts.EAB != nil {
		macKey = opts.EAB.MACKey
	}
	s := &Signer{
		opts:      opts,
		secrets:   newSecrets(opts.Directory, macKey),
		issuerKey: (&certmagic.ACMEIssuer{CA: opts.Directory}).IssuerKey(),
		clock:     opts.Clock,
		transport: opts.Transport,
	}
	parent := opts.Context
	if parent == nil {
		parent = context.Background()
	}
	s.life, s.endLife = context.WithCancel(parent)
	if s.transport == nil {
		s.transport = newTransport(opts.RootCAs)
	}
	if opts.Observe != nil {
		s.transport = observedTransport{next: s.transport, s: s}
	}
	s.upstream = s.newClient(contextRecording{base: s.transport, stash: &s.nonces})
	if opts.Challenge == ChallengeHTTP01 {
		s.http = &httpPublisher{storage: opts.Storage, ownKey: s.issuerKey, issuerKeys: opts.HTTPChallengeIssuerKeys,
			shared: s.sharedStore, now: s.clock.Now, ttl: opts.AttemptTimeout}
	}
	return s, nil
}

// directoryProblem is what is wrong with a directory URL, "" for
// nothing. It quotes the URL as secrets shows it, and one that does not
// parse not at all: a secret in it could not be recognized.
func directoryProblem(directory string) string {
	const want = "must be an absolute https:// (or http://) URL"
	u, err := url.Parse(directory)
	switch {
	case directory == "":
		return want
	case err != nil:
		return "the URL does not parse; it " + want
	case (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Sprintf("%q %s", newSecrets(directory, "").directory, want)
	}
	return ""
}

// resolverProblem says what is wrong with a DNS server's address as
// certmagic dials it: host[:port], the host an IP address or a host
// name, the port (53 when left out) one a dial can use.
func resolverProblem(s string) string {
	host, port := s, "53"
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	}
	if net.ParseIP(host) == nil && !isHostName(host) {
		return fmt.Sprintf("%q is not an IP address or a host name, with an optional port", s)
	}
	if p, err := net.LookupPort("udp", port); err != nil || p == 0 {
		return fmt.Sprintf("%q: the port must be from 1 to 65535", s)
	}
	return ""
}

// isHostName reports whether s is a host name a resolver may have:
// dot-separated labels of letters, digits, hyphens and underscores.
func isHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// observedTransport reports every upstream request to Options.Observe.
type observedTransport struct {
	next http.RoundTripper
	s    *Signer
}

func (t observedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	t.s.opts.Observe(t.s.bound.Profile(), time.Since(start), status)
	return resp, err
}

// newTransport is the HTTP transport to the upstream: bounded dials and
// handshakes, and the given roots when the upstream is private.
func newTransport(roots *x509.CertPool) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 15 * time.Second
	t.ResponseHeaderTimeout = time.Minute
	// Relays run concurrently (a runner's relay_issue jobs, finalizes
	// waiting inline); with the default two idle connections per host,
	// the others would each open a new TLS connection to the upstream.
	t.MaxIdleConnsPerHost = 32
	// An ACME answer's header takes some hundred bytes; Go's default
	// bound, 10 MB, would have each held in memory whole.
	t.MaxResponseHeaderBytes = maxResponseHeader
	if roots != nil {
		t.TLSClientConfig.RootCAs = roots
	}
	return t
}

// Close stops the preparations under way (prepare.go) and waits for
// their goroutines to return; none starts after it. The Caddy module
// calls it when its config is unloaded, so that the old signer's
// background work ends with its config rather than writing, later, to a
// store the unload may close. Jobs are not its business: the app's
// runner stops and waits for them. Calling it again does nothing more.
func (s *Signer) Close() error {
	s.mu.Lock()
	if s.endLife != nil {
		s.endLife()
	}
	s.mu.Unlock()
	s.preparations.Wait()
	return nil
}

// Bind gives the signer its profile's Settler, queue and store.
func (s *Signer) Bind(b signer.Binding) error { return s.bound.Bind("relay", b) }

func (s *Signer) binding() (*signer.Binding, *zap.Logger, error) { return s.bound.Get("relay") }

// sharedStore is the store of the profile the signer is bound to.
func (s *Signer) sharedStore() (*store.DB, error) {
	b, _, err := s.binding()
	if err != nil {
		return nil, err
	}
	return b.DB, nil
}

// CheckIdentifier refuses what the upstream challenge cannot prove:
// wildcards by http-01 (RFC 8555 §7.1.3), IP addresses by dns-01 (RFC 8738
// §7).
func (s *Signer) CheckIdentifier(id vocab.Identifier) error {
	switch {
	case s.opts.Challenge == ChallengeHTTP01 && id.Type == vocab.IdentifierDNS && strings.HasPrefix(id.Value, "*."):
		return &signer.Error{Kind: signer.KindRejectedIdentifier,
			Detail: fmt.Sprintf("%s cannot be issued by this profile: its upstream CA validates by http-01, which cannot prove a wildcard", id.Value)}
	case s.opts.Challenge == ChallengeDNS01 && id.Type == vocab.IdentifierIP:
		return &signer.Error{Kind: signer.KindRejectedIdentifier,
			Detail: fmt.Sprintf("%s cannot be issued by this profile: its upstream CA validates by dns-01, which cannot prove an IP address", id.Value)}
	}
	return nil
}

// issuePayload is a relay_issue job's payload.
type issuePayload struct {
	Profile string `json:"profile"`
	Order   string `json:"order"`
}

// Issue stores the order's mapping and queues its relay_issue job; the
// order stays processing until the job reports. The job's first attempt
// starts at once in this process when a runner here has room, and Issue
// waits up to FinalizeWait for it, so that the finalize of a quick
// upstream answers with the certificate. A repeat for the same order (a
// finalize resumed after a crash) finds the mapping and the live job and
// changes nothing.
func (s *Signer) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	b, log, err := s.binding()
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	for _, id := range req.Identifiers {
		if err := s.CheckIdentifier(id); err != nil {
			return signer.IssueOutcome{}, err
		}
	}
	if len(req.CSRDER) == 0 {
		return signer.IssueOutcome{}, errors.New("relay: issue request without a CSR")
	}
	// An upstream order prepared for this order is relayed instead of a
	// new one; a preparation still running here is worth a short wait.
	s.awaitPreparation(ctx, req.OrderID, s.opts.FinalizeWait)
	prepared, err := s.preparedUpstream(ctx, b, req.OrderID)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	ro, created, err := b.DB.CreateRelayOrder(ctx, store.NewRelayOrder{
		OrderID: req.OrderID, Profile: b.Profile, CSR: req.CSRDER,
		ClientAddr: req.ClientAddr, UserAgent: req.UserAgent, UpstreamOrderURL: prepared,
	}, s.clock.Now())
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	if ro.Status == store.RelayInvalid {
		return signer.IssueOutcome{}, fmt.Errorf("relay: order %s already failed: %s", ro.OrderID, s.secrets.text(ro.Detail))
	}
	if created {
		// Logged before the job starts: its own lines follow this one.
		log.Info("relay queued", zap.String("event", "relay_queued"), zap.String("profile", b.Profile),
			zap.String("order", ro.OrderID), zap.String("client", ro.ClientAddr))
	}
	if s.opts.FinalizeWait < 0 {
		return signer.IssueOutcome{Pending: true}, s.enqueue(ctx, b.Queue, b.Profile, ro)
	}
	// The mapping is durable already (CreateRelayOrder), so a job lost
	// to a crash before RunNow makes it durable is re-queued at start
	// (RecoverJobs) like any relay in flight.
	//
	// The finalize answers as soon as the attempt has recorded the
	// certificate (the Settler's Issued, a durable write: the order is
	// valid), not when the job is settled: the mapping's and the job's
	// settles, both bookkeeping without an fsync of their own, follow in
	// the background. RunNow runs on without the request's context, so
	// that the request's end does not turn into a flush of the job; when
	// the attempt does not record the certificate in time, the finalize
	// answers after RunNow, which has then made the job durable.
	issued, stop := s.watchIssued(ro.OrderID)
	defer stop()
	ran := make(chan error, 1)
	go func() {
		_, _, err := b.Queue.RunNow(context.WithoutCancel(ctx), s.spec(b.Profile, ro), s.opts.FinalizeWait)
		ran <- err
	}()
	select {
	case err := <-ran:
		if err != nil {
			return signer.IssueOutcome{}, err
		}
	case <-issued:
	}
	return signer.IssueOutcome{Pending: true}, nil
}

// watchIssued returns a channel closed once an attempt in this process
// has recorded the certificate of orderID, and the function that stops
// watching.
func (s *Signer) watchIssued(orderID string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	if s.issued == nil {
		s.issued = map[string]chan struct{}{}
	}
	s.issued[orderID] = ch
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		if s.issued[orderID] == ch {
			delete(s.issued, orderID)
		}
		s.mu.Unlock()
	}
}

// announceIssued tells the finalize waiting for orderID, if any, that its
// certificate is recorded.
func (s *Signer) announceIssued(orderID string) {
	s.mu.Lock()
	ch := s.issued[orderID]
	delete(s.issued, orderID)
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (s *Signer) spec(profile string, ro store.RelayOrder) jobs.Spec {
	return jobs.Spec{
		Kind: IssueKind, Key: ro.OrderID, Lane: signer.SigningLane(profile),
		Payload:  issuePayload{Profile: profile, Order: ro.OrderID},
		Deadline: ro.Expires, MaxAttempts: s.opts.MaxAttempts,
	}
}

func (s *Signer) enqueue(ctx context.Context, q *jobs.Queue, profile string, ro store.RelayOrder) error {
	_, _, err := q.Enqueue(ctx, s.spec(profile, ro))
	return err
}

// JobKinds implements signer.JobWorker.
func (s *Signer) JobKinds() []string { return []string{IssueKind, PreparedKind} }

// RecoverJobs re-queues the relays of this profile still in flight; the
// job's kind+key identity makes it a no-op for those whose job is alive.
func (s *Signer) RecoverJobs(ctx context.Context, q *jobs.Queue) error {
	b, log, err := s.binding()
	if err != nil {
		return err
	}
	inFlight, err := b.DB.ProcessingRelayOrders(ctx, b.Profile)
	if err != nil {
		return err
	}
	for _, ro := range inFlight {
		if err := s.enqueue(ctx, q, b.Profile, ro); err != nil {
			return fmt.Errorf("relay: re-queueing order %s: %w", ro.OrderID, err)
		}
	}
	if len(inFlight) > 0 {
		log.Info("relays in flight re-queued", zap.String("event", "relay_recovered"),
			zap.String("profile", b.Profile), zap.Int("orders", len(inFlight)))
	}
	return nil
}

// RunJob does one attempt of a relay.
func (s *Signer) RunJob(ctx context.Context, job *jobs.Job) jobs.Outcome {
	switch job.Kind {
	case IssueKind:
	case PreparedKind:
		return s.runPrepared(ctx, job)
	default:
		return jobs.Failed("relay: unknown job kind " + job.Kind)
	}
	var p issuePayload
	if err := jobs.Decode(job, &p); err != nil {
		return jobs.Failed(err.Error())
	}
	b, log, err := s.binding()
	if err != nil {
		return jobs.RetryAfter(err.Error(), 30*time.Second)
	}
	if wait := s.coolingDown(ctx); wait > 0 {
		return jobs.RetryAfter(fmt.Sprintf("the upstream rate-limited this profile; waiting %s", wait.Round(time.Second)), wait)
	}
	ro, err := b.DB.GetRelayOrder(ctx, p.Order)
	if errors.Is(err, store.ErrNotFound) {
		return jobs.Failed("no relay mapping for order " + p.Order)
	}
	if err != nil {
		return jobs.Retry(err.Error())
	}
	if ro.OrderStatus == acme.StatusInvalid {
		// An operator's retry of a job whose order failed: say so rather
		// than report done.
		return jobs.Failed("order " + ro.OrderID + " is invalid; there is nothing to relay")
	}
	if ro.OrderStatus != acme.StatusProcessing || ro.Status != store.RelayProcessing {
		return jobs.Done() // settled already, by an earlier attempt
	}

	actx, cancel := context.WithTimeout(ctx, s.opts.AttemptTimeout)
	defer cancel()
	defer s.forgetLook(ro.OrderID)
	rec := &recorder{base: s.transport, now: s.clock.Now}
	actx = withRecorder(actx, rec)
	issued, err := s.relay(actx, s.upstream, rec, b, log, ro)
	if err != nil {
		if ctx.Err() != nil {
			// The runner is stopping; this attempt was not the upstream's
			// fault nor ours.
			return jobs.RetryAfter("interrupted: "+s.secrets.reasonOf(err), 0)
		}
		return s.outcome(ctx, b, log, ro, s.secrets.classifyFor(err, rec.lastResponse(), ro.Identifiers))
	}
	if err := b.Settler.Issued(ctx, ro.OrderID, issued.Chain, issued.Alternates...); err != nil {
		return jobs.Retry("recording the certificate: " + err.Error())
	}
	s.announceIssued(ro.OrderID)
	if s.afterIssued != nil {
		s.afterIssued()
	}
	if err := b.DB.SettleRelayOrder(ctx, ro.OrderID, store.RelayValid, "", s.clock.Now()); err != nil {
		log.Error("recording a finished relay", zap.String("event", "relay_settle_failed"),
			zap.String("order", ro.OrderID), zap.Error(err))
	}
	log.Info("relay issued", zap.String("event", "relay_issued"), zap.String("profile", b.Profile),
		zap.String("order", ro.OrderID), zap.Int("attempt", job.Attempts))
	return jobs.Done()
}

// outcome turns a classified failure into the job's outcome.
func (s *Signer) outcome(ctx context.Context, b *signer.Binding, log *zap.Logger, ro store.RelayOrder, f failure) jobs.Outcome {
	reason := "upstream " + s.secrets.directory + ": " + f.reason
	if f.forgetAccount {
		s.forgetAccount(ctx, b.Profile)
	}
	log.Warn("relay attempt failed", zap.String("event", "relay_attempt_failed"), zap.String("profile", b.Profile),
		zap.String("order", ro.OrderID), zap.Stringer("verdict", f.verdict), zap.Duration("retry_after", f.after),
		zap.String("reason", f.reason))
	if f.verdict == coolDown {
		s.coolDown(ctx, f.after)
	}
	if f.verdict == giveUp && f.refusal != 0 {
		s.keepRefusal(ro, &signer.Error{Kind: f.refusal, Detail: f.refusalDetail, Subproblems: f.subproblems})
	}
	return outcomeFor(f, reason)
}

// heldRefusal is a refusal kept for AbandonJob, until its order expires.
type heldRefusal struct {
	refusal *signer.Error
	until   time.Time
}

// keepRefusal holds the refusal of ro's order for the AbandonJob the
// runner calls next, and drops those of orders that expired: their jobs
// are past their deadline, so no attempt of theirs runs any more, and
// an abandon that has not come for one by then (its attempt's lease
// lapsed, and another runner took the job over) is not coming here.
func (s *Signer) keepRefusal(ro store.RelayOrder, refusal *signer.Error) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.refusals {
		if !now.Before(r.until) {
			delete(s.refusals, id)
		}
	}
	if s.refusals == nil {
		s.refusals = make(map[string]heldRefusal)
	}
	s.refusals[ro.OrderID] = heldRefusal{refusal: refusal, until: ro.Expires}
}

// outcomeFor is the job outcome of a classified failure: give up at once;
// wait as long as the upstream asked without spending an attempt (a rate
// limit, or an order still processing that asks for a longer wait than an
// attempt waits in place); an upstream failing with a Retry-After (a 503
// in maintenance) is waited for as it asks or the backoff, whichever is
// later, spending the attempt, so that one answering "Retry-After: 1" for
// hours is not asked every second until the order expires; else retry
// with backoff.
func outcomeFor(f failure, reason string) jobs.Outcome {
	switch {
	case f.verdict == giveUp:
		return jobs.Failed(reason)
	case f.verdict == coolDown:
		return jobs.RetryAfter(reason, f.after)
	case f.after > 0 && f.failedAnswer:
		return jobs.RetryNoSooner(reason, f.after)
	case f.after > 0:
		return jobs.RetryAfter(reason, f.after)
	}
	return jobs.Retry(reason)
}

// AbandonJob marks the order invalid through the Settler, with the real
// reason for the operator, and records it on the mapping too. An order the
// upstream refused for its CSR or names fails with that refusal's problem
// (badCSR, rejectedIdentifier, caa, dns, connection, compound), with a
// subproblem for each of its names the upstream named, instead of the
// generic one. Both writes are
// guarded on the order still processing, so a second run changes nothing;
// one that could not write (the database away) returns the error, and
// the runner calls it again — the refusal is kept for that call.
func (s *Signer) AbandonJob(ctx context.Context, job *jobs.Job, reason string) error {
	var p issuePayload
	if jobs.Decode(job, &p) != nil {
		return nil
	}
	b, log, err := s.binding()
	if err != nil {
		return nil
	}
	// A reason stored by an earlier version may hold what is redacted
	// now.
	reason = s.secrets.text(reason)
	if job.Kind == PreparedKind {
		// A prepared upstream order left active was never finalized: it
		// expires upstream.
		log.Warn("a prepared upstream order was not deactivated", zap.String("event", "relay_prepared_left"),
			zap.String("profile", b.Profile), zap.String("order", p.Order), zap.String("reason", reason))
		return nil
	}
	detail := "relay failed: " + reason
	if !strings.Contains(reason, s.secrets.directory) {
		detail = "relay to " + s.secrets.directory + " failed: " + reason
	}
	s.mu.Lock()
	refusal := s.refusals[p.Order].refusal
	s.mu.Unlock()
	settle := b.Settler.Failed
	if refusal != nil {
		settle = func(ctx context.Context, order, detail string) error {
			return b.Settler.Refused(ctx, order, refusal, detail)
		}
	}
	if err := settle(ctx, p.Order, detail); err != nil {
		return fmt.Errorf("relay: recording the failure of order %s: %w", p.Order, err)
	}
	s.mu.Lock()
	delete(s.refusals, p.Order)
	s.mu.Unlock()
	if err := b.DB.SettleRelayOrder(ctx, p.Order, store.RelayInvalid, detail, s.clock.Now()); err != nil {
		return fmt.Errorf("relay: recording the failure of order %s: %w", p.Order, err)
	}
	return nil
}

// coolingDown is how long the profile still waits out an upstream's rate
// limit (its account's 429): as this process was told, else as another
// instance on the database was (coolDown records it there too). A
// cool-down the store cannot tell is taken as none: the attempt goes on,
// and an upstream still limiting the account says so again.
func (s *Signer) coolingDown(ctx context.Context) time.Duration {
	if wait := s.coolingDownHere(); wait > 0 {
		return wait
	}
	b, _, err := s.binding()
	if err != nil {
		return 0
	}
	until, err := b.DB.RelayCoolDown(ctx, s.issuerKey, b.Profile)
	if err != nil {
		return 0
	}
	s.coolUntil(until)
	return s.coolingDownHere()
}

// coolingDownHere is coolingDown as this process knows it, without asking
// the store.
func (s *Signer) coolingDownHere() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coolTill.Sub(s.clock.Now())
}

// coolDown makes the profile wait d before its next upstream request, on
// every instance on the database: the upstream limits the account, which
// they all share.
func (s *Signer) coolDown(ctx context.Context, d time.Duration) {
	until := s.clock.Now().Add(d)
	s.coolUntil(until)
	b, log, err := s.binding()
	if err != nil {
		return
	}
	if err := b.DB.ExtendRelayCoolDown(ctx, s.issuerKey, b.Profile, until); err != nil {
		// This instance waits all the same; another learns of the limit
		// from its own next request.
		log.Warn("recording the upstream's rate limit for the other instances", zap.String("event", "relay_cool_down_unshared"),
			zap.String("profile", b.Profile), zap.Error(err))
	}
}

// coolUntil makes this process wait until until, unless it waits longer.
func (s *Signer) coolUntil(until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.coolTill) {
		s.coolTill = until
	}
}

// client returns an ACME client of its own, its requests seen by rec.
func (s *Signer) client(rec *recorder) *acme.Client { return s.newClient(rec) }

func (s *Signer) newClient(rt http.RoundTripper) *acme.Client {
	return &acme.Client{
		Directory:  s.opts.Directory,
		HTTPClient: &http.Client{Transport: boundedAnswers{rt}, Timeout: 2 * time.Minute},
		UserAgent:  "caddy-acme-proxy",
		// The relay polls itself, with backoff (see poller): acmez's
		// FinalizeOrder then returns the order as the finalize left it.
		PollTimeout: time.Nanosecond,
	}
}

// boundedAnswers stops reading an upstream answer past maxAnswerBytes,
// a problem document past maxProblemBytes: acmez reads every answer
// whole into memory, and an upstream (or a gateway in front of it)
// answering without end would otherwise fill it, for as long as the
// client's timeout lets it; and its text of a problem costs the square
// of the problem's size (see maxProblemBytes).
type boundedAnswers struct{ next http.RoundTripper }

func (t boundedAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		bound, what := maxAnswerBytes, "answer"
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
			bound, what = maxProblemBytes, "problem document"
		}
		resp.Body = &boundedBody{body: resp.Body, left: bound, bound: bound, what: what}
	}
	return resp, err
}

// boundedBody is an answer's body that fails once more than its bound is
// read.
type boundedBody struct {
	body  io.ReadCloser
	left  int
	bound int
	what  string // in the error: "answer"
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.left == 0 {
		// At the bound: an answer ending here is whole.
		var probe [1]byte
		if n, err := b.body.Read(probe[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("the upstream's %s is larger than %d bytes", b.what, b.bound)
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= n
	return n, err
}

func (b *boundedBody) Close() error { return b.body.Close() }

// Revoke asks the upstream to revoke cert, signing with the upstream
// account (which ordered it). A certificate already revoked is not an
// error. Its error is stored as the revocation job's last error: it is
// redacted. While the profile waits out the upstream's rate limit it
// asks nothing and answers a *signer.WaitError for the rest of the wait;
// an answer that asks the relay to wait (a 429, which cools the whole
// profile down as a relay's does, or a Retry-After on a 5xx) is one too.
func (s *Signer) Revoke(ctx context.Context, cert *x509.Certificate, reason *int) error {
	return s.secrets.err(s.revoke(ctx, cert, reason))
}

func (s *Signer) revoke(ctx context.Context, cert *x509.Certificate, reason *int) error {
	b, _, err := s.binding()
	if err != nil {
		return err
	}
	if wait := s.coolingDown(ctx); wait > 0 {
		return &signer.WaitError{After: wait, Err: fmt.Errorf("relay: revoking at %s: the upstream rate-limited this profile; waiting %s",
			s.secrets.directory, wait.Round(time.Second))}
	}
	rec := &recorder{base: s.transport, now: s.clock.Now}
	c := s.client(rec)
	acct, err := s.account(ctx, c, b.Profile)
	if err != nil {
		return err
	}
	code := 0
	if reason != nil {
		code = *reason
	}
	err = c.RevokeCertificate(ctx, acct, cert, nil, code)
	var p acme.Problem
	if errors.As(err, &p) && p.Type == acme.ProblemTypeAlreadyRevoked {
		return nil
	}
	if err == nil {
		return nil
	}
	f := s.secrets.classify(err, rec.lastResponse())
	if f.forgetAccount {
		s.forgetAccount(ctx, b.Profile)
	}
	switch {
	case f.verdict == giveUp:
		return fmt.Errorf("relay: revoking at %s: %w: %w", s.secrets.directory, signer.ErrRevocationRefused, err)
	case f.verdict == coolDown:
		s.coolDown(ctx, f.after)
		return &signer.WaitError{After: f.after, Err: fmt.Errorf("relay: revoking at %s: %w", s.secrets.directory, err)}
	case f.after > 0 && f.failedAnswer:
		return &signer.WaitError{After: f.after, Spend: true, Err: fmt.Errorf("relay: revoking at %s: %w", s.secrets.directory, err)}
	}
	return fmt.Errorf("relay: revoking at %s: %w", s.secrets.directory, err)
}

// RevocationRoute is signer.RevokeByJob: the upstream must be told.
func (s *Signer) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

// identifiersOf converts stored identifiers to the upstream's.
func identifiersOf(ids []vocab.Identifier) []acme.Identifier {
	out := make([]acme.Identifier, len(ids))
	for i, id := range ids {
		out[i] = acme.Identifier{Type: id.Type, Value: id.Value}
	}
	return out
}

var (
	_ signer.Signer            = (*Signer)(nil)
	_ signer.Binder            = (*Signer)(nil)
	_ signer.JobWorker         = (*Signer)(nil)
	_ signer.IdentifierChecker = (*Signer)(nil)
	_ signer.WaitEstimator     = (*Signer)(nil)
	_ signer.OrderPreparer     = (*Signer)(nil)
)
