// Package delegated is the signer of a profile served by an instance that
// holds none of its signing material: no CA key, no upstream account, no
// script. Signing is delegated to the instances that mount the same
// profile with its real signer, through the job queue they share: a
// finalized order becomes a signer.IssueKind job in the profile's
// signer.SigningLane, which only those instances claim (see
// signer.Delegate). A compromised front end therefore cannot sign.
package delegated

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
)

// Name is the signer's name in configuration and for operators.
const Name = "delegated"

// issueAttempts is an IssueKind job's attempt budget. Attempts are spent
// only by instances that hold the signer and fail to hand the order over
// (a fault on their side); while none serves the lane the job waits,
// unclaimed, until the order expires (its deadline).
const issueAttempts = 12

// ErrNotHere is what Revoke answers: a delegate revokes nothing itself.
var ErrNotHere = errors.New("delegated: the profile's signer is not mounted in this instance; revocation at its backend runs where it is")

// Signer is the delegated signer. The zero value is ready to be bound.
type Signer struct {
	bound signer.Bound
}

// Bind implements signer.Binder.
func (s *Signer) Bind(b signer.Binding) error { return s.bound.Bind(Name, b) }

// Issue queues the order for an instance that holds the profile's signer
// and answers Pending. A repeat for the same order (a finalize resumed)
// finds the live job and changes nothing.
func (s *Signer) Issue(ctx context.Context, req signer.IssueRequest) (signer.IssueOutcome, error) {
	b, log, err := s.bound.Get(Name)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	o, err := b.DB.GetOrder(ctx, b.Profile, req.OrderID)
	if err != nil {
		return signer.IssueOutcome{}, err
	}
	job, created, err := b.Queue.Enqueue(ctx, jobs.Spec{
		Kind: signer.IssueKind, Key: req.OrderID, Lane: signer.SigningLane(b.Profile),
		Payload:  signer.IssueJob{Profile: b.Profile, Order: req.OrderID},
		Deadline: o.Expires, MaxAttempts: issueAttempts,
	})
	if err != nil {
		return signer.IssueOutcome{}, fmt.Errorf("delegated: queueing order %s for its signer: %w", req.OrderID, err)
	}
	if created {
		log.Info("issuance delegated to the instances holding the signer", zap.String("event", "issue_delegated"),
			zap.String("profile", b.Profile), zap.String("order", req.OrderID), zap.Int64("job", job.ID))
	}
	return signer.IssueOutcome{Pending: true}, nil
}

// Revoke is never called for a delegate: the ACME layer records a
// revocation where the published route says (a ledger row, or a
// signer_revoke job for an instance holding the signer).
func (s *Signer) Revoke(context.Context, *x509.Certificate, *int) error { return ErrNotHere }

// RevocationRoute is RevokeByJob: the ACME layer asks what the instances
// holding the real signer published instead, and this is only what an
// operator listing the profile sees before anything is.
func (s *Signer) RevocationRoute() signer.RevocationRoute { return signer.RevokeByJob }

// DelegatesSigning implements signer.Delegate.
func (*Signer) DelegatesSigning() {}

// Interface guards
var (
	_ signer.Delegate = (*Signer)(nil)
	_ signer.Binder   = (*Signer)(nil)
)
