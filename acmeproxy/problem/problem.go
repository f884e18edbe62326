// Package problem builds the RFC 7807 problem documents an ACME server
// answers with (RFC 8555 §6.7). Every problem a client sees is built here,
// so a type, its HTTP status and its wording live in one place.
package problem

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

// Problem is an RFC 7807 problem document. It is an error, so it can travel
// up through ordinary returns and be recognized with errors.As.
type Problem struct {
	Type        acme.ProblemType `json:"type"`
	Detail      string           `json:"detail,omitempty"`
	Status      int              `json:"status,omitempty"`
	Identifier  *acme.Identifier `json:"identifier,omitempty"`
	Subproblems []*Problem       `json:"subproblems,omitempty"`
	// Algorithms lists acceptable JWS algorithms on badSignatureAlgorithm
	// (RFC 8555 §6.2).
	Algorithms []string `json:"algorithms,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header (whole
	// seconds, rounded up): when the client may try again.
	RetryAfter time.Duration `json:"-"`
}

func (p *Problem) Error() string {
	return fmt.Sprintf("%s: %s", p.Type, p.Detail)
}

// As returns the problem inside err, if there is one.
func As(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

func newf(t acme.ProblemType, status int, format string, args ...any) *Problem {
	return &Problem{Type: t, Status: status, Detail: fmt.Sprintf(format, args...)}
}

// For returns a copy of p about one identifier, for use as a subproblem.
func (p *Problem) For(typ, value string) *Problem {
	c := *p
	c.Status = 0
	// As the client sent it, so that it finds it among its own; a value
	// longer than any identifier can be is cut (Clip).
	c.Identifier = &acme.Identifier{Type: Clip(typ), Value: Clip(value)}
	return &c
}

// Constructors, one per type, each with the HTTP status RFC 8555 and common
// practice (Boulder, Pebble) give it.

func MalformedF(format string, args ...any) *Problem {
	return newf(acme.ErrorMalformed, http.StatusBadRequest, format, args...)
}

// UnsupportedMediaType answers a POST without application/jose+json
// (RFC 8555 §6.2): status 415, type malformed.
func UnsupportedMediaType(got string) *Problem {
	return newf(acme.ErrorMalformed, http.StatusUnsupportedMediaType, "content type must be application/jose+json, not %s", Quote(got))
}

// TooLarge answers a body over the size cap.
func TooLarge(limit int64) *Problem {
	return newf(acme.ErrorMalformed, http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", limit)
}

func MethodNotAllowed() *Problem {
	return newf(acme.ErrorMalformed, http.StatusMethodNotAllowed, "method not allowed")
}

func NotFound(what string) *Problem {
	return newf(acme.ErrorMalformed, http.StatusNotFound, "%s not found", what)
}

func BadNonceF(format string, args ...any) *Problem {
	return newf(acme.ErrorBadNonce, http.StatusBadRequest, format, args...)
}

func BadSignatureAlgorithmF(algs []string, format string, args ...any) *Problem {
	p := newf(acme.ErrorBadSignatureAlgorithm, http.StatusBadRequest, format, args...)
	p.Algorithms = algs
	return p
}

func BadPublicKeyF(format string, args ...any) *Problem {
	return newf(acme.ErrorBadPublicKey, http.StatusBadRequest, format, args...)
}

// ExternalAccountRequiredF answers a newAccount without the external
// account binding the profile requires (RFC 8555 §7.3.4).
func ExternalAccountRequiredF(format string, args ...any) *Problem {
	return newf(acme.ErrorExternalAccountRequired, http.StatusUnauthorized, format, args...)
}

func AccountDoesNotExistF(format string, args ...any) *Problem {
	return newf(acme.ErrorAccountDoesNotExist, http.StatusBadRequest, format, args...)
}

// UnauthorizedF answers a request whose signer may not do what it asks.
func UnauthorizedF(format string, args ...any) *Problem {
	return newf(acme.ErrorUnauthorized, http.StatusForbidden, format, args...)
}

// DeactivatedAccountF answers a request signed by an account that is no
// longer valid (RFC 8555 §7.3.6: "status code 401 (Unauthorized) and type
// urn:ietf:params:acme:error:unauthorized").
func DeactivatedAccountF(format string, args ...any) *Problem {
	return newf(acme.ErrorUnauthorized, http.StatusUnauthorized, format, args...)
}

// URLMismatch answers a JWS whose protected "url" is not the request URL
// (RFC 8555 §6.4: "reject the request as unauthorized").
func URLMismatch(got, want string) *Problem {
	return newf(acme.ErrorUnauthorized, http.StatusUnauthorized, "JWS url %s does not match the request URL %q", Quote(got), want)
}

func BadCSRF(format string, args ...any) *Problem {
	return newf(acme.ErrorBadCSR, http.StatusBadRequest, format, args...)
}

func RejectedIdentifierF(format string, args ...any) *Problem {
	return newf(acme.ErrorRejectedIdentifier, http.StatusBadRequest, format, args...)
}

func UnsupportedIdentifierF(format string, args ...any) *Problem {
	return newf(acme.ErrorUnsupportedIdentifier, http.StatusBadRequest, format, args...)
}

func OrderNotReadyF(format string, args ...any) *Problem {
	return newf(acme.ErrorOrderNotReady, http.StatusForbidden, format, args...)
}

func InvalidContactF(format string, args ...any) *Problem {
	return newf(acme.ErrorInvalidContact, http.StatusBadRequest, format, args...)
}

func UnsupportedContactF(format string, args ...any) *Problem {
	return newf(acme.ErrorUnsupportedContact, http.StatusBadRequest, format, args...)
}

// AlreadyRevokedF answers a revocation of a certificate already revoked
// (RFC 8555 §7.6).
func AlreadyRevokedF(format string, args ...any) *Problem {
	return newf(acme.ErrorAlreadyRevoked, http.StatusBadRequest, format, args...)
}

// BadRevocationReasonF answers a revocation reason that is not an RFC 5280
// CRLReason the server accepts (RFC 8555 §7.6).
func BadRevocationReasonF(format string, args ...any) *Problem {
	return newf(acme.ErrorBadRevocationReason, http.StatusBadRequest, format, args...)
}

// Unavailable answers a request the server accepted but could not finish
// in time (status 503, type serverInternal); the client should retry
// after the Retry-After the handler sets.
func Unavailable(format string, args ...any) *Problem {
	return newf(acme.ErrorServerInternal, http.StatusServiceUnavailable, format, args...)
}

func ConflictF(format string, args ...any) *Problem {
	return newf(acme.ErrorMalformed, http.StatusConflict, format, args...)
}

// Validation failures (RFC 8555 §8): recorded on the challenge, so they
// carry no HTTP status.

func ConnectionF(format string, args ...any) *Problem {
	return &Problem{Type: acme.ErrorConnection, Detail: fmt.Sprintf(format, args...)}
}

func IncorrectResponseF(format string, args ...any) *Problem {
	return &Problem{Type: acme.ErrorIncorrectResponse, Detail: fmt.Sprintf(format, args...)}
}

func DNSF(format string, args ...any) *Problem {
	return &Problem{Type: acme.ErrorDNS, Detail: fmt.Sprintf(format, args...)}
}

func TLSF(format string, args ...any) *Problem {
	return &Problem{Type: acme.ErrorTLS, Detail: fmt.Sprintf(format, args...)}
}

// CAAF is a refusal by the identifier's CAA records (RFC 8555 §6.7, RFC
// 8659): recorded on a challenge it carries no status; at finalize it is
// CAARefusalF's.
func CAAF(format string, args ...any) *Problem {
	return &Problem{Type: acme.ErrorCAA, Detail: fmt.Sprintf(format, args...)}
}

// Refusals of an order stated when it is finalized, about its
// identifiers (a signer's backend, an upstream CA, found their CAA
// records forbid it, their DNS failing, them out of reach): the order's
// error, with the HTTP status a finalize answers it with, unlike the
// challenge errors of the same types above, which carry none.

// CAARefusalF is a finalize refused by the identifiers' CAA records: 403.
func CAARefusalF(format string, args ...any) *Problem {
	return newf(acme.ErrorCAA, http.StatusForbidden, format, args...)
}

// DNSRefusalF is a finalize refused for the identifiers' DNS: 400.
func DNSRefusalF(format string, args ...any) *Problem {
	return newf(acme.ErrorDNS, http.StatusBadRequest, format, args...)
}

// ConnectionRefusalF is a finalize refused for identifiers that could not
// be reached: 400.
func ConnectionRefusalF(format string, args ...any) *Problem {
	return newf(acme.ErrorConnection, http.StatusBadRequest, format, args...)
}

// CompoundF is a refusal of several identifiers for reasons of different
// types (RFC 8555 §6.7.1), each a subproblem (CompoundOf): 400.
func CompoundF(format string, args ...any) *Problem {
	return newf(acme.ErrorCompound, http.StatusBadRequest, format, args...)
}

// Internal answers a server fault. The detail is deliberately generic: the
// cause belongs in the operator's log, not in the client's answer.
func Internal() *Problem {
	return newf(acme.ErrorServerInternal, http.StatusInternalServerError, "the server could not complete the request; the operator's log has the cause")
}

// InternalF answers a server fault with a detail of its own, for a fault
// whose kind the client may know (never its cause, which belongs in the
// operator's log).
func InternalF(format string, args ...any) *Problem {
	return newf(acme.ErrorServerInternal, http.StatusInternalServerError, format, args...)
}

// Compound wraps per-identifier problems under one top-level problem.
func CompoundOf(top *Problem, subs []*Problem) *Problem {
	top.Subproblems = subs
	return top
}

// IdentifiersRefused is the answer to a request refused for some of its
// identifiers, subs a problem for each (at least one, each naming its
// identifier): the first one's type and detail without its identifier
// — several instead of the detail when there are more — and each a
// subproblem (RFC 8555 §6.7.1); status 403 for caa (as CAARefusalF),
// 400 otherwise.
func IdentifiersRefused(subs []*Problem, several string) *Problem {
	top := *subs[0]
	top.Identifier, top.Status = nil, http.StatusBadRequest
	if top.Type == acme.ErrorCAA {
		top.Status = http.StatusForbidden
	}
	if len(subs) > 1 {
		top.Detail = several
	}
	return CompoundOf(&top, subs)
}

// InvalidProfileF answers a new-order naming a certificate profile the
// server does not offer, or a finalize of an order whose certificate
// profile is no longer offered (draft-ietf-acme-profiles).
func InvalidProfileF(format string, args ...any) *Problem {
	return newf(acme.ErrorInvalidProfile, http.StatusBadRequest, format, args...)
}

// AlreadyReplacedF answers a newOrder whose "replaces" names a certificate
// another order, not invalid, already replaces (RFC 9773 §5: status 409).
func AlreadyReplacedF(format string, args ...any) *Problem {
	return newf(acme.ErrorAlreadyReplaced, http.StatusConflict, format, args...)
}

// RateLimitedF answers a request over one of the profile's limits (RFC
// 8555 §6.6): status 429, type rateLimited, with the Retry-After the
// limit's bucket says. The detail names the limit.
func RateLimitedF(retryAfter time.Duration, format string, args ...any) *Problem {
	p := newf(acme.ErrorRateLimited, http.StatusTooManyRequests, format, args...)
	p.RetryAfter = retryAfter
	return p
}

// RetryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
