// Package acme is the protocol's vocabulary, defined once for every
// package of this module: the identifier, the statuses of RFC 8555 §7.1.6,
// identifier and challenge types, the error type URNs of §6.7 and the
// names of the events this server audits and notifies. It is a leaf: it
// imports nothing of this module, so store/, signer/ and the HTTP front
// can all share it without a cycle.
package acme

import (
	"strconv"
	"strings"
)

// Identifier is an ACME identifier (RFC 8555 §7.1.4; RFC 8738 for "ip").
type Identifier struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Identifier types.
const (
	IdentifierDNS = "dns" // RFC 8555 §9.7.7
	IdentifierIP  = "ip"  // RFC 8738
)

// MaxOrderIdentifiers bounds one order's identifiers (and so its
// authorizations) whatever a profile's max_identifiers limit says, which
// is at most this: it bounds an order's row here, and an upstream CA's
// order the relay reads.
const MaxOrderIdentifiers = 1000

// Challenge types (RFC 8555 §8.3, §8.4; RFC 8737).
const (
	ChallengeHTTP01    = "http-01"
	ChallengeDNS01     = "dns-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// Status is the status of an account, order, authorization or challenge
// (RFC 8555 §7.1.6). Each object uses a subset.
type Status string

// The statuses of RFC 8555 §7.1.6.
const (
	StatusPending     Status = "pending"
	StatusReady       Status = "ready"
	StatusProcessing  Status = "processing"
	StatusValid       Status = "valid"
	StatusInvalid     Status = "invalid"
	StatusDeactivated Status = "deactivated"
	StatusExpired     Status = "expired"
	StatusRevoked     Status = "revoked"
)

// ProblemType is an ACME error type (RFC 8555 §6.7).
type ProblemType string

// errorNS is the URN prefix of ACME error types.
const errorNS = "urn:ietf:params:acme:error:"

// Short is t without the ACME error namespace ("badCSR" for
// urn:ietf:params:acme:error:badCSR); a type outside it is returned whole.
func (t ProblemType) Short() string { return strings.TrimPrefix(string(t), errorNS) }

// The ACME error types (RFC 8555 §6.7; draft-ietf-acme-profiles for
// invalidProfile; RFC 9773 §7.4 for alreadyReplaced).
const (
	ErrorAccountDoesNotExist     ProblemType = errorNS + "accountDoesNotExist"
	ErrorAlreadyRevoked          ProblemType = errorNS + "alreadyRevoked"
	ErrorBadCSR                  ProblemType = errorNS + "badCSR"
	ErrorBadNonce                ProblemType = errorNS + "badNonce"
	ErrorBadPublicKey            ProblemType = errorNS + "badPublicKey"
	ErrorBadRevocationReason     ProblemType = errorNS + "badRevocationReason"
	ErrorBadSignatureAlgorithm   ProblemType = errorNS + "badSignatureAlgorithm"
	ErrorCAA                     ProblemType = errorNS + "caa"
	ErrorCompound                ProblemType = errorNS + "compound"
	ErrorConnection              ProblemType = errorNS + "connection"
	ErrorDNS                     ProblemType = errorNS + "dns"
	ErrorExternalAccountRequired ProblemType = errorNS + "externalAccountRequired"
	ErrorIncorrectResponse       ProblemType = errorNS + "incorrectResponse"
	ErrorInvalidContact          ProblemType = errorNS + "invalidContact"
	ErrorMalformed               ProblemType = errorNS + "malformed"
	ErrorOrderNotReady           ProblemType = errorNS + "orderNotReady"
	ErrorRateLimited             ProblemType = errorNS + "rateLimited"
	ErrorRejectedIdentifier      ProblemType = errorNS + "rejectedIdentifier"
	ErrorServerInternal          ProblemType = errorNS + "serverInternal"
	ErrorTLS                     ProblemType = errorNS + "tls"
	ErrorUnauthorized            ProblemType = errorNS + "unauthorized"
	ErrorUnsupportedContact      ProblemType = errorNS + "unsupportedContact"
	ErrorUnsupportedIdentifier   ProblemType = errorNS + "unsupportedIdentifier"
	ErrorUserActionRequired      ProblemType = errorNS + "userActionRequired"
	ErrorInvalidProfile          ProblemType = errorNS + "invalidProfile"
	ErrorAlreadyReplaced         ProblemType = errorNS + "alreadyReplaced"
)

// The events this server audits, logs and notifies (a destination
// subscribes to them by these names).
const (
	EventCertificateIssued       = "certificate_issued"
	EventCertificateIssueFailed  = "certificate_issue_failed"
	EventCertificateRevoked      = "certificate_revoked"
	EventRevocationRefused       = "revocation_refused" // a client's revoke-cert refused
	EventRevocationFailed        = "revocation_failed"  // a backend never confirmed a revocation
	EventRevocationReasonChanged = "revocation_reason_changed"
	EventAccountCreated          = "account_created"
	EventAccountDeactivated      = "account_deactivated"
	EventChallengeFailed         = "challenge_failed"
	EventRevocationRefusals      = "revocation_refusals"     // a summary of refused revocations from one source
	EventAuditPruned             = "audit_pruned"            // audit rows deleted, by an operator or the retention sweep
	EventRetentionPruned         = "retention_pruned"        // dead orders, long-expired certificates, empty accounts deleted by the retention sweep
	EventEABKeyCreated           = "eab_key_created"         // an operator minted an external account binding key
	EventEABKeyRevoked           = "eab_key_revoked"         // an operator revoked one
	EventAccountBindingRefused   = "account_binding_refused" // a newAccount's external account binding refused (RFC 8555 §7.3.4)
	EventJobRetried              = "job_retried"             // an operator made a job run now
	EventJobCancelled            = "job_cancelled"           // an operator cancelled a job
	EventRenewEarly              = "renew_early"             // an operator moved a certificate's renewal window to now (RFC 9773)
	EventRateLimited             = "rate_limited"            // a request refused by one of the profile's limits (once per limit and subject an interval)
	EventFinalizeRefused         = "finalize_refused"        // a finalize refused before signing: the CAA records, checked again, forbid it (one row per identifier)
	EventCRLRegenerated          = "crl_regenerated"         // an operator published a new CRL of a profile's CA
)

// Events lists every event above, in their order: what an audit search
// may ask for.
var Events = []string{EventCertificateIssued, EventCertificateIssueFailed, EventCertificateRevoked,
	EventRevocationRefused, EventRevocationFailed, EventRevocationReasonChanged, EventAccountCreated,
	EventAccountDeactivated, EventChallengeFailed, EventRevocationRefusals, EventAuditPruned,
	EventRetentionPruned, EventEABKeyCreated, EventEABKeyRevoked, EventAccountBindingRefused,
	EventJobRetried, EventJobCancelled, EventRenewEarly, EventRateLimited, EventFinalizeRefused, EventCRLRegenerated}

// CRLReason codes (RFC 5280 §5.3.1), as revoke-cert's "reason" carries
// them (RFC 8555 §7.6). 7 is unassigned.
const (
	ReasonUnspecified          = 0
	ReasonKeyCompromise        = 1
	ReasonCACompromise         = 2
	ReasonAffiliationChanged   = 3
	ReasonSuperseded           = 4
	ReasonCessationOfOperation = 5
	ReasonCertificateHold      = 6
	ReasonRemoveFromCRL        = 8
	ReasonPrivilegeWithdrawn   = 9
	ReasonAACompromise         = 10
)

// reasonNames are RFC 5280's names of the CRLReason codes, by code.
var reasonNames = [...]string{ReasonUnspecified: "unspecified", ReasonKeyCompromise: "keyCompromise",
	ReasonCACompromise: "cACompromise", ReasonAffiliationChanged: "affiliationChanged", ReasonSuperseded: "superseded",
	ReasonCessationOfOperation: "cessationOfOperation", ReasonCertificateHold: "certificateHold",
	ReasonRemoveFromCRL: "removeFromCRL", ReasonPrivilegeWithdrawn: "privilegeWithdrawn", ReasonAACompromise: "aACompromise"}

// ReasonText writes a CRLReason code for people: "4 (superseded)", or the
// bare code when RFC 5280 names none.
func ReasonText(code int) string {
	if name := ReasonName(code); name != "" {
		return strconv.Itoa(code) + " (" + name + ")"
	}
	return strconv.Itoa(code)
}

// ReasonName is RFC 5280's name of a CRLReason code ("superseded"), or ""
// for a code it names none for.
func ReasonName(code int) string {
	if code < 0 || code >= len(reasonNames) {
		return ""
	}
	return reasonNames[code]
}
