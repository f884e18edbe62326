// Package signer defines how a profile turns a checked order into a
// certificate. The ACME layer (acmeproxy) has proved the client's control of
// every identifier and checked the CSR against the order before it calls a
// Signer; a Signer decides only how the certificate is produced. Signers
// never import acmeproxy: one that finishes later reports through the
// Settler it was built with, so the order row, the audit row and the
// notification are written in one place.
package signer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// IssueRequest is a finalized order, ready to sign.
type IssueRequest struct {
	OrderID string
	Profile string
	// CSR has been checked against the order: its names equal the order's
	// identifiers, its key is allowed and is not the account key. A signer
	// must still not trust its extensions.
	CSR    *x509.CertificateRequest
	CSRDER []byte
	// Identifiers are the order's, normalized, in the order's order.
	Identifiers []acme.Identifier
	// NotBefore and NotAfter are what the client asked for in newOrder;
	// zero when it asked for nothing. RFC 8555 §7.4: a certificate with
	// other dates than those asked for must not be issued; a signer that
	// builds the leaf issues exactly these, or refuses (ValidityChecker
	// refuses at newOrder what it would not issue).
	NotBefore, NotAfter time.Time
	// ClientAddr and UserAgent describe the client that finalized, for
	// audit and for an operator reading a relayed order.
	ClientAddr string
	UserAgent  string
	// CRLURL, when set, is the base of the CRL distribution point the
	// profile wants in the leaf (an absolute http:// URL): the leaf names
	// CRLURL + "/" + CAKeyID of the CA that signs it, the CRL the ACME layer
	// serves at <prefix>/crl/<key id>. Signers that build the leaf
	// themselves put it in; others ignore it.
	CRLURL string
	// CertificateProfile is the certificate profile the order chose
	// (draft-ietf-acme-profiles), nil when the order has none. The ACME
	// layer has checked what is policy (key types, the number of
	// identifiers); a signer that builds the leaf applies the rest, never
	// widening what it would issue without it.
	CertificateProfile *CertificateProfile
	// Replaces is the certID (RFC 9773 §4.1) of the certificate the order
	// replaces, as newOrder's "replaces" named it and the ACME layer
	// checked it (this account's, sharing an identifier, not already
	// replaced); "" for none. A signer whose backend takes it (an
	// upstream CA offering ARI) passes it on.
	Replaces string
}

// CertificateProfile is what a certificate profile asks of the leaf.
type CertificateProfile struct {
	// Name is the profile's name, as the client chose it.
	Name string
	// Lifetime, when set, caps the leaf's validity (a signer may issue
	// shorter, never longer than its own limit).
	Lifetime time.Duration
	// ExtKeyUsage, when set, are the leaf's only extended key usages;
	// unset, the signer's default (server authentication).
	ExtKeyUsage []x509.ExtKeyUsage
	// OmitCommonName leaves the subject's common name out; the names are
	// in the subject alternative names only.
	OmitCommonName bool
	// UpstreamProfile, when set, is the certificate profile a signer that
	// obtains the leaf from another ACME CA (relay) asks that CA for in
	// its newOrder (draft-ietf-acme-profiles). Only such a signer takes it.
	UpstreamProfile string
}

// IssueOutcome is what Issue did: signed now (Chain set), or accepted the
// work and will report through its Settler (Pending).
type IssueOutcome struct {
	// Chain is DER certificates, leaf first, then intermediates.
	Chain [][]byte
	// Alternates are other chains for the same leaf the signer offers
	// (RFC 8555 §7.4.2), each DER, leaf first; most signers have none.
	Alternates [][][]byte
	Pending    bool
}

// RevocationRoute says where a revocation is recorded.
type RevocationRoute int

const (
	// RevokeInLedger: the signer is a local CA; the ACME layer records the
	// revocation in its own ledger in one transaction and the CRL follows.
	RevokeInLedger RevocationRoute = iota + 1
	// RevokeByJob: the backend (an upstream CA, a script) must be told; the
	// revocation is queued as a job for the process holding the backend.
	RevokeByJob
)

// ErrRevocationRefused marks a backend's stated refusal to revoke (an
// upstream CA's problem document, a program's exit 2): the revocation
// fails at once instead of being retried until the certificate expires.
var ErrRevocationRefused = errors.New("the backend refused the revocation")

// WaitError is a backend's request to be asked again no sooner than
// After: an upstream CA's rate limit (429), or its Retry-After on an
// answer that it is unavailable (503). Work that fails with it is tried
// again then, not at its usual backoff. Spend says the failure costs
// one of the work's attempts (an unavailable backend, which may never
// return); without it, the wait is the backend's pacing (a rate limit),
// which costs none.
type WaitError struct {
	After time.Duration
	Spend bool
	Err   error
}

func (e *WaitError) Error() string { return e.Err.Error() }
func (e *WaitError) Unwrap() error { return e.Err }

// Signer produces certificates for one profile.
type Signer interface {
	// Issue signs now (Chain) or accepts the work and finishes it later
	// (Pending), reporting through its Settler. An error that is a *Error
	// is the signer's refusal and is shown to the client; any other error
	// is a server fault. Issue may be called again for the same order
	// after a crash left it unfinished; a signer that answered Pending
	// must treat the repeat as a no-op.
	Issue(ctx context.Context, req IssueRequest) (IssueOutcome, error)
	// Revoke withdraws trust at whatever issued the certificate. It is
	// idempotent. reason is an RFC 5280 CRLReason code, nil for none. An
	// error that is ErrRevocationRefused is the backend's stated refusal,
	// which asking again cannot change; one that is a *WaitError is tried
	// again no sooner than it says; any other is tried again.
	Revoke(ctx context.Context, cert *x509.Certificate, reason *int) error
	// RevocationRoute says whether revocation is a local ledger write or a
	// job.
	RevocationRoute() RevocationRoute
}

// CAChainer is implemented by signers that know the chain of the CA they
// issue from, served as <prefix>/ca.pem. DER, issuing CA first.
type CAChainer interface {
	CAChain(ctx context.Context) ([][]byte, error)
}

// WaitEstimator is implemented by signers that finish later and can tell
// how long an order's certificate is still expected to take, which the
// ACME layer tells a client polling the processing order (Retry-After).
type WaitEstimator interface {
	// ExpectedWait is how long from now the signer expects to settle the
	// order, or why it cannot say.
	ExpectedWait(ctx context.Context, orderID string) Wait
}

// Wait is a WaitEstimator's answer for one order.
type Wait struct {
	// For is how long from now the signer expects to settle the order;
	// meaningful when Known.
	For   time.Duration
	Known bool
	// Idle reports that the signer has no work for the order, neither
	// under way nor waiting (its job is settled or missing): nothing it
	// does will settle the order until the order is handed to it again
	// (the ACME layer resumes orders left processing). Never set when
	// the signer could not look (its store not answering).
	Idle bool
}

// JobWait is the Wait of the newest job of kind and key in q, for a
// signer's ExpectedWait (and the ACME layer's handover job): the time
// until its next attempt while it waits for one; running, when set, while
// an attempt runs (in any process); Idle when no live job is left; else
// no estimate (an attempt running, one due, the store not answering).
func JobWait(ctx context.Context, q *jobs.Queue, kind, key string, now time.Time, running time.Duration) Wait {
	d, next, err := q.NextAttempt(ctx, kind, key, now)
	switch {
	case err != nil:
		return Wait{}
	case next == jobs.NextWaiting:
		return Wait{For: d, Known: true}
	case next == jobs.NextRunning && running > 0:
		return Wait{For: running, Known: true}
	case next == jobs.NextNone:
		return Wait{Idle: true}
	}
	return Wait{}
}

// Settler is how a signer that answered Pending reports the end of the
// work. It is given to the signer when it is built.
type Settler interface {
	// Issued records the certificate chain (DER, leaf first) and any
	// alternate chains for the same leaf (each DER, leaf first).
	Issued(ctx context.Context, orderID string, chain [][]byte, alternates ...[][]byte) error
	// Failed records a permanent failure. detail is for the operator;
	// the client sees a generic problem.
	Failed(ctx context.Context, orderID string, detail string) error
	// Refused records the signer's verdict against the request: the
	// order fails with the problem of refusal's Kind (any but
	// KindUnavailable), whose detail is refusal's Detail, or a generic
	// one when it has none; detail is for the operator. A Detail is
	// shown to the client as it is: it must hold no secret.
	Refused(ctx context.Context, orderID string, refusal *Error, detail string) error
}

// Binding is what the ACME layer gives a signer that finishes later: the
// profile it serves, the Settler to report to, and the job queue and store
// its durable work lives in. Every job the signer queues for its own work
// goes in the profile's SigningLane (jobs.Spec.Lane), so that only
// instances that hold this signer claim it.
type Binding struct {
	Profile string
	Settler Settler
	Queue   *jobs.Queue
	DB      *store.DB
	Logger  *zap.Logger
	// CertificateProfile, when set, looks up a certificate profile the
	// profile offers now, by name: for a signer whose durable work applies
	// an order's certificate profile later, in a job that may run in
	// another process or after a reload. ok is false for one no longer
	// offered.
	CertificateProfile func(name string) (cp *CertificateProfile, ok bool)
}

// Binder is implemented by signers that need a Binding. The ACME layer
// calls Bind once, when it builds the profile's server and before any
// Issue; an error fails the configuration.
type Binder interface {
	Bind(b Binding) error
}

// JobWorker is implemented by signers that run durable jobs. Their job
// payloads are JSON objects with a "profile" member naming the profile
// whose signer runs the job: the host dispatches each job to the signer
// of that profile, and retries later (without spending an attempt) a job
// whose profile this process does not mount.
type JobWorker interface {
	// JobKinds names the kinds of job the signer runs.
	JobKinds() []string
	// RunJob does one attempt, as jobs.Handler.Run.
	RunJob(ctx context.Context, job *jobs.Job) jobs.Outcome
	// AbandonJob is called when a job is retired without success, as
	// jobs.Handler.Abandon: an error (what it writes could not be
	// written, the database away) has it called again, and the job is
	// retired once it returns nil. Its side effects must be idempotent:
	// it may run more than once for one retirement.
	AbandonJob(ctx context.Context, job *jobs.Job, reason string) error
	// RecoverJobs re-queues, when a runner starts, the work of this
	// signer's profile that a crash may have left without a live job.
	RecoverJobs(ctx context.Context, q *jobs.Queue) error
}

// OrderPreparer is implemented by signers that can start on an order's
// certificate before it is finalized (a relay placing the upstream order
// and answering its challenges while the client proves its names here).
// The ACME layer calls PrepareOrder once the new order is stored; it must
// not block the new-order request, and must never obtain a certificate:
// that waits for Issue, after the client's proof and the CSR's check.
// Work prepared for an order that is never finalized is the signer's to
// abandon; expires is when the order can no longer be finalized.
type OrderPreparer interface {
	PrepareOrder(ctx context.Context, orderID string, expires time.Time)
}

// IdentifierChecker is implemented by signers that cannot issue for some
// identifiers whatever the profile's policy allows (a relay solving
// http-01 upstream cannot obtain a wildcard). The ACME layer asks at
// newOrder, so a client is refused before it proves anything.
type IdentifierChecker interface {
	// CheckIdentifier returns nil, or a *Error of KindRejectedIdentifier
	// whose detail says why. id is normalized; a wildcard keeps its "*.".
	CheckIdentifier(id acme.Identifier) error
}

// ValidityChecker is implemented by signers that build the leaf's
// validity themselves. RFC 8555 §7.4: a server that cannot issue the
// notBefore and notAfter a newOrder asks for MUST answer with an error and
// MUST NOT issue other dates. The ACME layer asks at newOrder, so that a
// client is refused before it proves anything; the signer then issues
// exactly the window it accepted, or, when what it checks at signing has
// changed since (its lifetime, its CA), refuses the finalize.
type ValidityChecker interface {
	// CheckValidity returns nil, or a *Error of KindBadValidity whose
	// detail says why. notBefore and notAfter are as the client asked
	// (zero for a date it left to the signer); cp is the order's
	// certificate profile, nil for none.
	CheckValidity(ctx context.Context, notBefore, notAfter time.Time, cp *CertificateProfile) error
}

// Kind classifies a signer's refusal so the ACME layer can answer with the
// matching problem type.
type Kind int

const (
	// KindBadCSR: the CSR is unacceptable (RFC 8555 badCSR).
	KindBadCSR Kind = iota + 1
	// KindRejectedIdentifier: the signer will not issue for a name.
	KindRejectedIdentifier
	// KindUnavailable: the backend cannot sign now; try again later.
	KindUnavailable
	// KindBadValidity: the signer will not issue the notBefore and
	// notAfter the order asks for (RFC 8555 malformed).
	KindBadValidity
	// KindCAA: the CAA records of a name forbid the signer's backend
	// (an upstream CA) to issue for it (RFC 8555 caa, RFC 8659).
	KindCAA
	// KindDNS: the backend's validation of a name failed on the name's
	// DNS (RFC 8555 dns): its servers do not answer, or answer an error.
	KindDNS
	// KindConnection: the backend's validation could not connect to the
	// name (RFC 8555 connection).
	KindConnection
	// KindRateLimited: the backend limits how often it issues for the
	// order's names (an upstream CA's per-name rate limit), for longer
	// than an order waits (RFC 8555 rateLimited).
	KindRateLimited
	// KindCompound: the backend refused several of the order's names
	// for reasons of different kinds, each stated in the refusal's
	// Subproblems (RFC 8555 compound).
	KindCompound
)

// Subproblem is a refusal about one of the order's identifiers (RFC 8555
// §6.7.1), of a Kind other than KindUnavailable and KindCompound.
type Subproblem struct {
	Kind Kind
	// Detail is shown to the client as it is: it must hold no secret.
	Detail string
	// Identifier is one of the order's own, as the order holds it.
	Identifier acme.Identifier
}

// Error is a signer's refusal, with a detail fit for the client.
type Error struct {
	Kind   Kind
	Detail string
	Err    error // the cause, for the operator's log; may be nil
	// Subproblems, when set, say which of the order's identifiers the
	// refusal is about, and why for each; the client sees each as a
	// subproblem of the order's error. The signer bounds how many.
	Subproblems []Subproblem
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Detail, e.Err)
	}
	return e.Detail
}

func (e *Error) Unwrap() error { return e.Err }

// AsError reports whether err is a signer refusal, and returns it.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
