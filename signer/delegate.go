package signer

// Serving a profile without its signer.
//
// A front end may mount a profile with a signer that holds nothing (a
// Delegate): it serves the profile's ACME endpoint, records each finalized
// order and queues an IssueKind job for it in the profile's SigningLane.
// Only runners of instances that mount the profile with its real signer
// serve that lane, so only they claim the job, sign, and settle the order;
// every job a real signer queues for its own work (relaying, a script run,
// a revocation at the backend, a CRL) goes in the same lane.

// IssueKind is the job a Delegate queues for a finalized order: an
// instance holding the profile's signer hands the order to it. Keyed by
// the order id, payload IssueJob.
const IssueKind = "signer_issue"

// IssueJob is the payload of an IssueKind job.
type IssueJob struct {
	Profile string `json:"profile"`
	Order   string `json:"order"`
}

// SigningLane is the job lane of the work only an instance holding the
// profile's signer can do (see jobs.Spec.Lane).
func SigningLane(profile string) string { return "signer:" + profile }

// AnySignerLane is the job lane every instance that holds at least one
// profile's signer serves: housekeeping of signed things (refreshing the
// CRLs) that a front end cannot do.
const AnySignerLane = "signer"

// Delegate is implemented by a signer that holds no key, account or
// program and signs nothing itself: its Issue queues an IssueKind job in
// the profile's SigningLane and answers Pending. What the profile's real
// signer would answer for ca.pem, the CRLs and the revocation route comes
// from what an instance holding it published in the store.
type Delegate interface {
	Signer
	// DelegatesSigning marks the signer; it does nothing.
	DelegatesSigning()
}

// IsDelegate reports whether s is a Delegate.
func IsDelegate(s Signer) bool {
	_, ok := s.(Delegate)
	return ok
}
