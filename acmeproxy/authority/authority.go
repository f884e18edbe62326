// Package authority is the ACME server's core, one Authority per profile:
// orders and their state machine, issuing, settling and resuming,
// revocation, CRL publishing, validations recorded, audit and
// notifications, and the policy hooks limits will use. The HTTP front
// (package acmeproxy), the job handlers and the operator layer all call
// it; it knows nothing of HTTP routing, JWS or rendering.
package authority

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/notify"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock"
	"github.com/acmeproxy/caddy-acme-proxy/internal/incarnation"
	"github.com/acmeproxy/caddy-acme-proxy/internal/logevery"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Validator checks challenges for real. Its methods return nil when the
// challenge is met, a *problem.Problem when the client's response is wrong
// (recorded on the challenge), and any other error for a fault on our side.
type Validator interface {
	HTTP01(ctx context.Context, identType, identValue, token, keyAuth string) error
	DNS01(ctx context.Context, domain, keyAuth string) error
	TLSALPN01(ctx context.Context, identType, identValue, keyAuth string) error
}

// Config is what the authority needs of its profile's configuration,
// checked and defaulted by the caller.
type Config struct {
	// Profile names the profile.
	Profile string
	// Prefix is the path the HTTP front serves the profile under, for
	// operators.
	Prefix string
	// Challenges are the challenge types the profile offers.
	Challenges []string
	// CRLURL is the base of the CRL distribution point of the profile's
	// leaves, for a signer that publishes a CRL.
	CRLURL string
	// Policy refuses an identifier the profile's allow and deny lists do
	// not permit, with a subproblem for it; nil permits every identifier.
	Policy func(acme.Identifier) *problem.Problem
	// CertificateProfiles are the certificate profiles offered, by name
	// (draft-ietf-acme-profiles); none, and an order can ask for none.
	CertificateProfiles map[string]CertificateProfile
	// DefaultCertificateProfile, when set, names the one an order that
	// asks for none gets.
	DefaultCertificateProfile string
	// EAB is the profile's external account binding rule (RFC 8555
	// §7.3.4): EABRequired, EABOptional, or "" for none (a binding a
	// client sends is then ignored).
	EAB string
	// Renewal places the renewal windows of the profile's certificates
	// (RFC 9773); the zero value is the defaults.
	Renewal RenewalConfig
	// Limits are the profile's rate limits (see limits.go); the zero
	// value limits nothing.
	Limits Limits
}

// The external account binding rules of a profile.
const (
	EABRequired = "required" // every new account binds an operator-minted key
	EABOptional = "optional" // a new account may bind one
)

// Options are an Authority's collaborators.
type Options struct {
	DB        *store.DB
	Queue     *jobs.Queue
	Signer    signer.Signer
	Validator Validator
	Clock     clock.Clock // default: wall clock
	Logger    *zap.Logger // default: no logging
	// RevokeWait bounds how long a revocation that a job carries to the
	// signer's backend is waited for before the request answers "queued";
	// default DefaultRevokeWait.
	RevokeWait time.Duration
	// SignerName names the signer for operators ("local_ca", "relay");
	// default its Go package's name.
	SignerName string
	// LookupAddr resolves client addresses to names for the audit trail;
	// default the system resolver. Each lookup is cut short after 100ms.
	LookupAddr func(ctx context.Context, addr string) ([]string, error)
	// Notify are the profile's notification destinations (its own, or
	// the app's defaults); each event a destination wants is stored as a
	// notify_deliver job with the event. Default none.
	Notify []notify.Destination
	// Metrics receives measurements; default none.
	Metrics Metrics
	// RequestDeadline bounds each ACME request the profile's HTTP front
	// serves, so that a database that stops answering (a hung server, a
	// dropped network path) turns each request into a 503 rather than a
	// hang; default DefaultRequestDeadline. It must exceed every wait a
	// request makes on purpose (RevokeWait, a finalize's wait for its
	// signer, an inline validation).
	RequestDeadline time.Duration
	// CAA, when set, checks the CAA records of every DNS identifier when
	// its authorization validates, and again at finalize when that was
	// more than CAARecheckAfter ago; nil checks none.
	CAA CAAChecker
	// Incarnation, when set, is this process's registration among the
	// processes of its host: its id is recorded with each claim of an
	// order, so that a later process that sees it exited resumes the
	// orders it left processing at once (ResumeOrphanedOrders) rather
	// than after StuckAfter. Nil records none.
	Incarnation *incarnation.Registry
}

// DefaultRequestDeadline is Options.RequestDeadline's default: three
// times the longest wait a request makes on purpose (DefaultRevokeWait).
const DefaultRequestDeadline = 30 * time.Second

// Authority is the ACME core of one profile.
type Authority struct {
	cfg       Config
	db        *store.DB
	queue     *jobs.Queue
	signer    signer.Signer
	validator Validator
	caa       CAAChecker            // nil: no CAA checks
	incarn    *incarnation.Registry // nil: claims name no claimer
	clock     clock.Clock
	log       *zap.Logger

	// inline bounds the validations running in challenge POSTs at once
	// (see validateInline); past it they go straight to the job.
	inline chan struct{}
	// answers coalesces concurrent answers to one challenge (see
	// AnswerChallenge).
	answers answering

	signerName string
	revokeWait time.Duration
	names      *reverseNames
	refusals   *refusalTally // unauthenticated revoke-cert refusals (see refusals.go)
	crls       crlCache
	pub        publication // see delegate.go
	notify     []notify.Destination
	metrics    Metrics
	// renewalFailed and renewalInvalid space the log lines of a signer
	// whose renewal window cannot be had (see renewalWindow).
	renewalFailed, renewalInvalid logevery.Limiter
}

// New builds the authority of a profile and binds its signer to it: a
// signer that finishes later reports to this authority (signer.Settler),
// and keeps its durable work in its queue and store.
func New(cfg Config, opts Options) (*Authority, error) {
	if opts.DB == nil || opts.Queue == nil || opts.Signer == nil || opts.Validator == nil {
		return nil, errors.New("authority: a profile needs a store, a queue, a signer and a validator")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = NopMetrics{}
	}
	if d := cfg.DefaultCertificateProfile; d != "" {
		if _, ok := cfg.CertificateProfiles[d]; !ok {
			return nil, fmt.Errorf("authority: the default certificate profile %q is not configured", d)
		}
	}
	if err := cfg.Renewal.Validate(); err != nil {
		return nil, fmt.Errorf("authority: renewal_info: %w", err)
	}
	if cfg.Policy == nil {
		cfg.Policy = func(acme.Identifier) *problem.Problem { return nil }
	}
	for i := range opts.Notify {
		if err := opts.Notify[i].Validate(); err != nil {
			return nil, err
		}
	}
	au := &Authority{
		cfg: cfg, db: opts.DB, queue: opts.Queue, signer: opts.Signer, validator: opts.Validator, caa: opts.CAA, incarn: opts.Incarnation,
		clock: opts.Clock, log: opts.Logger,
		inline: make(chan struct{}, maxInlineValidations),

		signerName: opts.SignerName,
		revokeWait: opts.RevokeWait,
		names:      newReverseNames(opts.LookupAddr),
		refusals:   newRefusalTally(),
		notify:     opts.Notify,
		metrics:    opts.Metrics,

		renewalFailed:  logevery.Limiter{Every: RenewalLogEvery},
		renewalInvalid: logevery.Limiter{Every: RenewalLogEvery},
	}
	if au.revokeWait <= 0 {
		au.revokeWait = DefaultRevokeWait
	}
	if b, ok := opts.Signer.(signer.Binder); ok {
		if err := b.Bind(signer.Binding{Profile: cfg.Profile, Settler: au, Queue: opts.Queue, DB: opts.DB, Logger: opts.Logger,
			CertificateProfile: au.signerCertificateProfile}); err != nil {
			return nil, fmt.Errorf("signer: %w", err)
		}
	}
	return au, nil
}

// Profile is the profile's name.
func (au *Authority) Profile() string { return au.cfg.Profile }

// Prefix is the path the profile is served under.
func (au *Authority) Prefix() string { return au.cfg.Prefix }

// SignerName names the signer for operators; "" when not configured.
func (au *Authority) SignerName() string { return au.signerName }

// CRLURL is the base of the CRL distribution point of the profile's leaves.
func (au *Authority) CRLURL() string { return au.cfg.CRLURL }

// Challenges are the challenge types the profile offers.
func (au *Authority) Challenges() []string { return au.cfg.Challenges }

// Logger is the authority's logger.
func (au *Authority) Logger() *zap.Logger { return au.log }

// Signer is the profile's signer.
func (au *Authority) Signer() signer.Signer { return au.signer }

var _ signer.Settler = (*Authority)(nil)
