package problem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
)

// RFC 8555 §6.7 (and its registry, §9.7.4) spells each error type; a
// client compares the whole URN, so one wrong letter is a different error.
func TestEachErrorTypeIsTheURNRFC8555Registers(t *testing.T) {
	tests := []struct {
		got  acme.ProblemType
		want string
	}{
		{acme.ErrorAccountDoesNotExist, "urn:ietf:params:acme:error:accountDoesNotExist"},
		{acme.ErrorAlreadyRevoked, "urn:ietf:params:acme:error:alreadyRevoked"},
		{acme.ErrorBadCSR, "urn:ietf:params:acme:error:badCSR"},
		{acme.ErrorBadNonce, "urn:ietf:params:acme:error:badNonce"},
		{acme.ErrorBadPublicKey, "urn:ietf:params:acme:error:badPublicKey"},
		{acme.ErrorBadRevocationReason, "urn:ietf:params:acme:error:badRevocationReason"},
		{acme.ErrorBadSignatureAlgorithm, "urn:ietf:params:acme:error:badSignatureAlgorithm"},
		{acme.ErrorCAA, "urn:ietf:params:acme:error:caa"},
		{acme.ErrorCompound, "urn:ietf:params:acme:error:compound"},
		{acme.ErrorConnection, "urn:ietf:params:acme:error:connection"},
		{acme.ErrorDNS, "urn:ietf:params:acme:error:dns"},
		{acme.ErrorExternalAccountRequired, "urn:ietf:params:acme:error:externalAccountRequired"},
		{acme.ErrorIncorrectResponse, "urn:ietf:params:acme:error:incorrectResponse"},
		{acme.ErrorInvalidContact, "urn:ietf:params:acme:error:invalidContact"},
		{acme.ErrorMalformed, "urn:ietf:params:acme:error:malformed"},
		{acme.ErrorOrderNotReady, "urn:ietf:params:acme:error:orderNotReady"},
		{acme.ErrorRateLimited, "urn:ietf:params:acme:error:rateLimited"},
		{acme.ErrorRejectedIdentifier, "urn:ietf:params:acme:error:rejectedIdentifier"},
		{acme.ErrorServerInternal, "urn:ietf:params:acme:error:serverInternal"},
		{acme.ErrorTLS, "urn:ietf:params:acme:error:tls"},
		{acme.ErrorUnauthorized, "urn:ietf:params:acme:error:unauthorized"},
		{acme.ErrorUnsupportedContact, "urn:ietf:params:acme:error:unsupportedContact"},
		{acme.ErrorUnsupportedIdentifier, "urn:ietf:params:acme:error:unsupportedIdentifier"},
		{acme.ErrorUserActionRequired, "urn:ietf:params:acme:error:userActionRequired"},
		{acme.ErrorAlreadyReplaced, "urn:ietf:params:acme:error:alreadyReplaced"}, // RFC 9773 §7.4
	}
	for _, tc := range tests {
		if string(tc.got) != tc.want {
			t.Errorf("type %q, want %q", tc.got, tc.want)
		}
	}
}

// Each constructor answers with the type and HTTP status the handlers
// rely on (RFC 8555 §6.7, §6.2, §6.4, §7.3.6, §7.4), and formats its
// detail like fmt.Sprintf.
func TestEachConstructorGivesItsTypeStatusAndDetail(t *testing.T) {
	tests := []struct {
		name       string
		p          *problem.Problem
		wantType   acme.ProblemType
		wantStatus int
		wantDetail string
	}{
		{"malformed", problem.MalformedF("bad %s %d", "thing", 7), acme.ErrorMalformed, 400, "bad thing 7"},
		{"unsupported media type", problem.UnsupportedMediaType("text/plain"), acme.ErrorMalformed, 415,
			`content type must be application/jose+json, not "text/plain"`},
		{"too large", problem.TooLarge(65536), acme.ErrorMalformed, 413, "request body is larger than 65536 bytes"},
		{"method not allowed", problem.MethodNotAllowed(), acme.ErrorMalformed, 405, "method not allowed"},
		{"not found", problem.NotFound("order"), acme.ErrorMalformed, 404, "order not found"},
		{"bad nonce", problem.BadNonceF("nonce %q", "n"), acme.ErrorBadNonce, 400, `nonce "n"`},
		{"bad signature algorithm", problem.BadSignatureAlgorithmF([]string{"ES256"}, "alg %s", "HS256"), acme.ErrorBadSignatureAlgorithm, 400, "alg HS256"},
		{"bad public key", problem.BadPublicKeyF("key %d", 1024), acme.ErrorBadPublicKey, 400, "key 1024"},
		{"account does not exist", problem.AccountDoesNotExistF("account %s", "a1"), acme.ErrorAccountDoesNotExist, 400, "account a1"},
		{"unauthorized", problem.UnauthorizedF("not %s", "yours"), acme.ErrorUnauthorized, 403, "not yours"},
		{"deactivated account", problem.DeactivatedAccountF("account is %s", "deactivated"), acme.ErrorUnauthorized, 401, "account is deactivated"},
		{"url mismatch", problem.URLMismatch("https://a/x", "https://a/y"), acme.ErrorUnauthorized, 401,
			`JWS url "https://a/x" does not match the request URL "https://a/y"`},
		{"bad CSR", problem.BadCSRF("csr %s", "bad"), acme.ErrorBadCSR, 400, "csr bad"},
		{"rejected identifier", problem.RejectedIdentifierF("%s denied", "a.example"), acme.ErrorRejectedIdentifier, 400, "a.example denied"},
		{"unsupported identifier", problem.UnsupportedIdentifierF("type %q", "email"), acme.ErrorUnsupportedIdentifier, 400, `type "email"`},
		{"order not ready", problem.OrderNotReadyF("order is %s", "pending"), acme.ErrorOrderNotReady, 403, "order is pending"},
		{"invalid contact", problem.InvalidContactF("contact %q", "mailto:"), acme.ErrorInvalidContact, 400, `contact "mailto:"`},
		{"unsupported contact", problem.UnsupportedContactF("contact %q", "tel:1"), acme.ErrorUnsupportedContact, 400, `contact "tel:1"`},
		{"already revoked", problem.AlreadyRevokedF("serial %s", "01"), acme.ErrorAlreadyRevoked, 400, "serial 01"},
		{"bad revocation reason", problem.BadRevocationReasonF("reason %d", 7), acme.ErrorBadRevocationReason, 400, "reason 7"},
		{"internal with a detail", problem.InternalF("could not %s", "issue"), acme.ErrorServerInternal, 500, "could not issue"},
		{"unavailable", problem.Unavailable("queued %s", "upstream"), acme.ErrorServerInternal, 503, "queued upstream"},
		{"conflict", problem.ConflictF("key %s", "taken"), acme.ErrorMalformed, 409, "key taken"},
		{"already replaced", problem.AlreadyReplacedF("certificate %s", "x.y"), acme.ErrorAlreadyReplaced, 409, "certificate x.y"},
		{"CAA refusal at finalize", problem.CAARefusalF("CAA at %s", "a.example"), acme.ErrorCAA, 403, "CAA at a.example"},
		{"DNS refusal at finalize", problem.DNSRefusalF("SERVFAIL at %s", "a.example"), acme.ErrorDNS, 400, "SERVFAIL at a.example"},
		{"compound", problem.CompoundF("%d identifiers refused", 2), acme.ErrorCompound, 400, "2 identifiers refused"},
		{"connection refusal at finalize", problem.ConnectionRefusalF("timeout at %s", "a.example"), acme.ErrorConnection, 400, "timeout at a.example"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.p.Type != tc.wantType || tc.p.Status != tc.wantStatus || tc.p.Detail != tc.wantDetail {
				t.Fatalf("got %s %d %q, want %s %d %q", tc.p.Type, tc.p.Status, tc.p.Detail, tc.wantType, tc.wantStatus, tc.wantDetail)
			}
			if tc.p.Identifier != nil || tc.p.Subproblems != nil {
				t.Errorf("a new problem is about an identifier or has subproblems: %+v", tc.p)
			}
		})
	}
}

// A validation failure is recorded on a challenge (RFC 8555 §8), not sent
// as a response, so it carries no HTTP status and none is rendered.
func TestValidationFailuresCarryNoHTTPStatus(t *testing.T) {
	tests := []struct {
		name     string
		p        *problem.Problem
		wantType acme.ProblemType
	}{
		{"connection", problem.ConnectionF("dial %s", "a:80"), acme.ErrorConnection},
		{"incorrect response", problem.IncorrectResponseF("got %q", "x"), acme.ErrorIncorrectResponse},
		{"dns", problem.DNSF("no TXT at %s", "_acme-challenge.a"), acme.ErrorDNS},
		{"tls", problem.TLSF("handshake with %s", "a"), acme.ErrorTLS},
		{"caa", problem.CAAF("records at %s", "a"), acme.ErrorCAA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.p.Type != tc.wantType || tc.p.Status != 0 || tc.p.Detail == "" || strings.Contains(tc.p.Detail, "%!") {
				t.Fatalf("got %+v, want type %s, status 0 and a formatted detail", tc.p, tc.wantType)
			}
			if members := render(t, tc.p); members["status"] != nil {
				t.Errorf("rendered a status: %v", members)
			}
		})
	}
}

// A server fault is answered generically: whatever went wrong belongs in
// the operator's log, not in the client's answer.
func TestAServerFaultIsAGeneric500(t *testing.T) {
	p := problem.Internal()
	if p.Type != acme.ErrorServerInternal || p.Status != http.StatusInternalServerError || p.Detail == "" {
		t.Fatalf("got %+v, want a serverInternal 500 with a detail", p)
	}
	// Each call is a new value: a handler that adjusts one (a 503 for an
	// unavailable signer) must not change the next client's answer.
	p.Status, p.Detail = http.StatusServiceUnavailable, "changed"
	if q := problem.Internal(); q.Status != http.StatusInternalServerError || q.Detail == "changed" {
		t.Fatalf("Internal returned a shared value: %+v", q)
	}
}

// render marshals p and reads it back as a JSON object.
func render(t *testing.T, p *problem.Problem) map[string]any {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not a JSON object: %v", b, err)
	}
	return m
}

// RFC 7807 §3.1 and RFC 8555 §6.7: a problem document is a JSON object
// with "type", "detail" and "status" (a number); an identifier, subproblems
// and algorithms appear only when there are some.
func TestAProblemRendersAsAnRFC7807Document(t *testing.T) {
	if problem.ContentType != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json (RFC 7807 §6.1)", problem.ContentType)
	}
	tests := []struct {
		name string
		p    *problem.Problem
		want map[string]any
	}{
		{"a plain problem", problem.BadNonceF("the nonce has expired"), map[string]any{
			"type": "urn:ietf:params:acme:error:badNonce", "detail": "the nonce has expired", "status": 400.0,
		}},
		{"badSignatureAlgorithm lists the acceptable algorithms (RFC 8555 §6.2)",
			problem.BadSignatureAlgorithmF([]string{"ES256", "EdDSA"}, "alg %q is not supported", "none"), map[string]any{
				"type": "urn:ietf:params:acme:error:badSignatureAlgorithm", "detail": `alg "none" is not supported`, "status": 400.0,
				"algorithms": []any{"ES256", "EdDSA"},
			}},
		{"a subproblem names its identifier and has no status",
			problem.RejectedIdentifierF("a.example is denied").For("dns", "a.example"), map[string]any{
				"type": "urn:ietf:params:acme:error:rejectedIdentifier", "detail": "a.example is denied",
				"identifier": map[string]any{"type": "dns", "value": "a.example"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(t, tc.p); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("rendered %v, want %v", got, tc.want)
			}
		})
	}
}

// RFC 8555 §6.7.1: a problem about several identifiers carries one
// subproblem per identifier, each naming its identifier, under a top-level
// problem that keeps its own type and status.
func TestSubproblemsRenderOnePerIdentifier(t *testing.T) {
	denied := problem.RejectedIdentifierF("denied by policy")
	subs := []*problem.Problem{
		denied.For("dns", "a.example.com"),
		problem.UnsupportedIdentifierF("type email is not supported").For("email", "x@example.com"),
		problem.MalformedF("not an IP address").For("ip", "300.1.1.1"),
	}
	top := problem.CompoundOf(problem.RejectedIdentifierF("several identifiers were refused"), subs)

	got := render(t, top)
	want := map[string]any{
		"type": "urn:ietf:params:acme:error:rejectedIdentifier", "detail": "several identifiers were refused", "status": 400.0,
		"subproblems": []any{
			map[string]any{"type": "urn:ietf:params:acme:error:rejectedIdentifier", "detail": "denied by policy",
				"identifier": map[string]any{"type": "dns", "value": "a.example.com"}},
			map[string]any{"type": "urn:ietf:params:acme:error:unsupportedIdentifier", "detail": "type email is not supported",
				"identifier": map[string]any{"type": "email", "value": "x@example.com"}},
			map[string]any{"type": "urn:ietf:params:acme:error:malformed", "detail": "not an IP address",
				"identifier": map[string]any{"type": "ip", "value": "300.1.1.1"}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rendered %v\nwant %v", got, want)
	}

	// For copies: the problem it was made from is still a top-level
	// problem, with its status and no identifier, and can make another.
	if denied.Status != http.StatusBadRequest || denied.Identifier != nil {
		t.Fatalf("For changed the problem it copied: %+v", denied)
	}
	if again := denied.For("dns", "b.example.com"); again.Identifier.Value != "b.example.com" || subs[0].Identifier.Value != "a.example.com" {
		t.Fatalf("subproblems share their identifier: %+v, %+v", again.Identifier, subs[0].Identifier)
	}
}

// A problem travels up through ordinary error returns, wrapped or not,
// and is found again with As; a plain error is no problem.
func TestAProblemIsFoundThroughWrapping(t *testing.T) {
	p := problem.OrderNotReadyF("the order is pending")
	if got := p.Error(); !strings.Contains(got, string(acme.ErrorOrderNotReady)) || !strings.Contains(got, "the order is pending") {
		t.Errorf("Error() = %q, want the type and the detail", got)
	}
	tests := []struct {
		name   string
		err    error
		wantOK bool
	}{
		{"the problem itself", p, true},
		{"wrapped once", fmt.Errorf("finalize: %w", p), true},
		{"wrapped twice", fmt.Errorf("handler: %w", fmt.Errorf("finalize: %w", p)), true},
		{"joined with another error", errors.Join(errors.New("other"), p), true},
		{"a plain error", errors.New("disk full"), false},
		{"a problem's text without the problem", fmt.Errorf("finalize: %v", p), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := problem.As(tc.err)
			if ok != tc.wantOK {
				t.Fatalf("As: ok=%v, want %v", ok, tc.wantOK)
			}
			if ok && got != p {
				t.Fatalf("As found %p, want the problem %p", got, p)
			}
		})
	}
}

func TestARateLimitedProblemIs429AndItsRetryAfterRoundsUpToWholeSeconds(t *testing.T) {
	p := problem.RateLimitedF(1500*time.Millisecond, "orders_per_account: over")
	if p.Type != acme.ErrorRateLimited || p.Status != http.StatusTooManyRequests || p.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("got %+v; want rateLimited, 429, the wait", p)
	}
	if b, _ := json.Marshal(p); strings.Contains(string(b), "1500") || strings.Contains(strings.ToLower(string(b)), "retry") {
		t.Errorf("the wait is in the document: %s; it belongs in the Retry-After header", b)
	}
	for _, tc := range []struct {
		in   time.Duration
		want int
	}{{time.Nanosecond, 1}, {time.Second, 1}, {time.Second + time.Millisecond, 2}, {59*time.Second + 1, 60}, {time.Hour, 3600}} {
		if got := problem.RetryAfterSeconds(tc.in); got != tc.want {
			t.Errorf("RetryAfterSeconds(%s) = %d; want %d", tc.in, got, tc.want)
		}
	}
}
