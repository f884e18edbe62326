package relay

import (
	"context"
	"errors"
	"fmt"
	"github.com/acmeproxy/caddy-acme-proxy/internal/retryafter"
	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/mholt/acmez/v3/acme"
)

// verdict is what a failed attempt calls for.
type verdict int

const (
	// retry: nobody stated a reason (the network, a gateway, a 5xx, a
	// timeout); try again with backoff, spending an attempt.
	retry verdict = iota + 1
	// coolDown: the upstream rate-limited us (429); the whole profile
	// waits, and the attempt is not spent.
	coolDown
	// giveUp: the upstream CA stated why it will not issue, or something
	// on our side can never work; retrying cannot help.
	giveUp
)

func (v verdict) String() string {
	switch v {
	case retry:
		return "retry"
	case coolDown:
		return "cool down"
	case giveUp:
		return "give up"
	}
	return "unknown"
}

// failure is a classified error.
type failure struct {
	verdict verdict
	// after is the upstream's Retry-After, zero when it sent none.
	after time.Duration
	// failedAnswer: the upstream's last answer was an error (4xx, 5xx),
	// whose Retry-After is a failure's, not a wait the work itself
	// takes (an order processing).
	failedAnswer bool
	// forgetAccount: the upstream no longer knows our account; register
	// again before the next attempt.
	forgetAccount bool
	// refusal is, for an upstream that stated why it will not issue for
	// the client's request (its CSR, its names), the signer's refusal to
	// pass on to the client; zero when the reason is ours or unstated.
	refusal signer.Kind
	// refusalDetail is what the client is told of the refusal: the
	// upstream's own detail for a refusal about its name the client can
	// act on (its CAA records, its DNS, its reachability), without the
	// relay's secrets and the upstream's URLs; "" for a generic detail.
	refusalDetail string
	// stated is, for a failure given up on for the upstream's stated
	// problem with subproblems, that problem: classifyFor reads in it
	// which of the order's identifiers it is about.
	stated *acme.Problem
	// subproblems are the client's: the refusal of each of the order's
	// identifiers the upstream named (classifyFor).
	subproblems []signer.Subproblem
	reason      string
	// limitDetail is a rate limit's detail, as the upstream stated it:
	// onNames reads in it whose limit it is.
	limitDetail string
}

// Bounds on a wait the upstream asks for.
const (
	defaultCoolDown = time.Minute
	maxRetryAfter   = 24 * time.Hour
)

// permanentError marks a failure that retrying cannot fix: a missing
// challenge type, a wildcard under http01, an upstream order or
// authorization that is invalid. It is the explicit counterpart of
// certmagic's ErrNoRetry: the caller says what is permanent, classify
// does not guess. One that wraps an upstream's problem (the error of an
// upstream order that became invalid) is that problem's refusal, as the
// same problem answered at once would be.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return permanentError{fmt.Errorf(format, args...)}
}

// classify decides by whose answer err is. last is the upstream's last
// HTTP response in this attempt, which carries what acmez's errors do not
// (Retry-After, and the status of a response that was not a problem
// document). The failure's reason is err's text without r.
func (r secrets) classify(err error, last response) failure {
	f := failure{verdict: retry, reason: r.reasonOf(err), failedAnswer: last.status >= 400}
	if last.retryAfter > 0 {
		f.after = min(last.retryAfter, maxRetryAfter)
	}
	var perm permanentError
	if errors.As(err, &perm) {
		f.verdict = giveUp
		var p acme.Problem
		if errors.As(perm.err, &p) {
			f.refusal = refusalOf(p.Type)
			f.refusalDetail = r.refusalDetail(f.refusal, perm.err, p.Detail)
			f.stated = withSubproblems(p)
		}
		f.reason = clipReason(f.reason)
		return f
	}
	var p acme.Problem
	if errors.As(err, &p) {
		// The HTTP status decides, not the document's status member,
		// which is advisory (RFC 7807 §3.1) and may disagree: a 503 is
		// retried whatever its body says, as acmez itself retries it.
		// The member stands in only without an error status to go on.
		status := last.status
		if status < 400 {
			status = p.Status
		} else if p.Status != 0 && p.Status != status {
			// acmez's error names the member's; the operator sees both.
			f.reason += fmt.Sprintf(" (answered with HTTP status %d)", status)
		}
		switch {
		case status == http.StatusTooManyRequests || p.Type == acme.ProblemTypeRateLimited:
			f.verdict, f.limitDetail = coolDown, p.Detail
		case status >= 500 || p.Type == acme.ProblemTypeServerInternal:
			f.verdict = retry
		case p.Type == acme.ProblemTypeBadNonce:
			f.verdict = retry
		case p.Type == acme.ProblemTypeAccountDoesNotExist:
			f.verdict, f.forgetAccount = retry, true
		case p.Type == acme.ProblemTypeUserActionRequired:
			// New terms of service (RFC 8555 §7.3.3), which a human
			// agrees to, not the relay: the operator is told where
			// they are, which only the answer's Link says.
			f.verdict = giveUp
			if last.termsOfService != "" {
				f.reason += " (the upstream's terms of service: " + quotedURL(r.text(last.termsOfService)) + ")"
			}
		default:
			// The CA stated a reason: badCSR, rejectedIdentifier,
			// unauthorized, malformed (our JWS), caa, dns, ...
			f.verdict = giveUp
			f.refusal = refusalOf(p.Type)
			f.refusalDetail = r.refusalDetail(f.refusal, err, p.Detail)
			f.stated = withSubproblems(p)
		}
	} else if last.status == http.StatusTooManyRequests {
		f.verdict = coolDown
	}
	// Everything else — transport errors, TLS, timeouts, a gateway's HTML
	// page, a body that is not JSON — is nobody's stated answer: retry.
	if errors.Is(err, context.DeadlineExceeded) {
		f.reason = "timed out: " + f.reason
	}
	if f.verdict == coolDown && f.after == 0 {
		f.after = defaultCoolDown
	}
	f.reason = clipReason(f.reason)
	return f
}

// maxReason bounds a failure's reason, which the job's last error, the
// order's failure detail and the log keep: an upstream's answer quoted
// whole (its detail, each of its subproblems) is the upstream's to size.
const maxReason = 8 << 10

func clipReason(s string) string { return textcut.Clip(s, maxReason, "…") }

// withSubproblems is p, for failure.stated, when it has subproblems;
// else nil.
func withSubproblems(p acme.Problem) *acme.Problem {
	if len(p.Subproblems) == 0 {
		return nil
	}
	return &p
}

// urlInText matches a URL quoted in an error's text, up to what ends it
// there: a blank, a quote, a bracket.
var urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>()\[\]{}\\]+`)

// withoutURLSecrets is s with each URL in it cut to where it leads: no
// user and password, only the names of its query's parameters, no
// fragment. A DNS provider's error may quote its API's URL whole (Go's
// *url.Error does; so does DuckDNS's own text), and some APIs take their
// token in the query; the reason is stored as the job's last error, which
// the admin API and the web page show, and logged. Read as text, not
// parsed, so that a URL that does not parse is cut all the same. The
// signer's own texts pass secrets.text, which takes the relay's own
// secrets out first, wherever they are (secrets.go).
func withoutURLSecrets(s string) string {
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		scheme, rest, _ := strings.Cut(u, "://")
		rest, _, _ = strings.Cut(rest, "#")
		rest, query, hasQuery := strings.Cut(rest, "?")
		if end := strings.IndexByte(rest, '/'); end >= 0 {
			if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
				rest = rest[at+1:]
			}
		} else if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			rest = rest[at+1:]
		}
		out := scheme + "://" + rest
		if hasQuery {
			out += "?" + queryNames(query)
		}
		return out
	})
}

// refusalOf is the refusal an upstream's problem type is for the client:
// the relay passes the client's CSR byte for byte and asks for its names,
// so an upstream that refuses the CSR or a name refuses the client's
// request, which its client should hear as such rather than as our
// internal error (which it would retry); so does one whose validation of
// a name failed on the name itself — its CAA records forbid the upstream
// CA, its DNS fails, it cannot be reached (RFC 8555 §6.7's caa, dns and
// connection) — which the client's administrator can fix, and the
// client hears it with that type. Every other stated reason
// (unauthorized, malformed, incorrectResponse or tls about the relay's
// own answer to a challenge) is about the relay's own requests: zero.
func refusalOf(typ string) signer.Kind {
	switch typ {
	case acme.ProblemTypeBadCSR, acme.ProblemTypeBadPublicKey:
		return signer.KindBadCSR
	case acme.ProblemTypeRejectedIdentifier, acme.ProblemTypeUnsupportedIdentifier:
		return signer.KindRejectedIdentifier
	case acme.ProblemTypeCAA:
		return signer.KindCAA
	case acme.ProblemTypeDNS:
		return signer.KindDNS
	case acme.ProblemTypeConnection:
		return signer.KindConnection
	}
	return 0
}

// maxRefusalDetail bounds the upstream's detail a client is shown.
const maxRefusalDetail = 512

// refusalDetail is what the client is told of a refusal of kind k, whose
// upstream detail is detail, which err carries: for a refusal about a
// name (refusalOf's caa, dns and connection, and a compound of them),
// the upstream's detail, naming the name when err says which (a
// nameProblem), without the relay's secrets and the upstream's own URLs
// (the upstream's account, its order); "" for the others, whose client
// hears a generic detail (the upstream's text there is about the CSR or
// the relay's request, for the operator).
func (r secrets) refusalDetail(k signer.Kind, err error, detail string) string {
	switch k {
	case signer.KindCAA, signer.KindDNS, signer.KindConnection, signer.KindCompound:
	default:
		return ""
	}
	detail = r.clientText(detail)
	if detail == "" {
		detail = "no detail given"
	}
	detail = textcut.Clip(detail, maxRefusalDetail, "…")
	if np, ok := errors.AsType[nameProblem](err); ok {
		return fmt.Sprintf("the upstream CA could not validate %s: %s", np.name, detail)
	}
	return "the upstream CA refused: " + detail
}

// clientText is s as a client may be shown it: as text shows it, and
// with every URL at the upstream's host — its account's, its orders' —
// cut to a mention: they are the relay's business.
func (r secrets) clientText(s string) string {
	s = r.text(s)
	if r.upstreamHost == "" {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		_, rest, _ := strings.Cut(u, "://")
		host, _, _ := strings.Cut(rest, "/")
		host, _, _ = strings.Cut(host, "?")
		if strings.EqualFold(host, r.upstreamHost) {
			return "(an upstream URL)"
		}
		return u
	})
}

// nameProblem is the problem an upstream stated about one of the
// order's names: the error of the challenge that failed to validate it.
// Its text is the problem's.
type nameProblem struct {
	name string
	acme.Problem
}

func (e nameProblem) Unwrap() error { return e.Problem }

// withCause is err, whose text it has, also wrapping cause (for errors.As).
type withCause struct {
	error
	cause error
}

func (e withCause) Unwrap() []error { return []error{e.error, e.cause} }

// response is what classify needs from an upstream HTTP response.
type response struct {
	status     int
	retryAfter time.Duration
	// retryAfterSet says the answer's Retry-After held a value (which
	// may be a wait of 0).
	retryAfterSet bool
	// termsOfService is the target of the answer's Link
	// rel="terms-of-service", if any.
	termsOfService string
}

// recorder is an http.RoundTripper that remembers the last response it
// saw. One recorder serves one attempt, which makes its requests one at a
// time.
type recorder struct {
	base http.RoundTripper
	now  func() time.Time

	mu   sync.Mutex
	last response
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	r.note(resp, err)
	return resp, err
}

// note remembers one request's answer.
func (r *recorder) note(resp *http.Response, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.last = response{}
		return
	}
	wait, ok := retryafter.Parse(resp.Header.Get("Retry-After"), r.now(), maxRetryAfter)
	r.last = response{status: resp.StatusCode, retryAfter: wait, retryAfterSet: ok}
	if resp.Request != nil {
		if terms := relLinks(resp, "terms-of-service"); len(terms) > 0 {
			r.last.termsOfService = terms[0]
		}
	}
}

type recorderKey struct{}

// withRecorder returns ctx carrying rec: the requests the signer's shared
// client makes with it are noted by rec (see contextRecording).
func withRecorder(ctx context.Context, rec *recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, rec)
}

// contextRecording is the transport of the signer's shared client: each
// request's answer is noted by the recorder its context carries, so that
// one client (one connection pool, one pool of upstream nonces) serves
// every attempt while each attempt still sees its own last answer.
// It also keeps its stash of nonces for the relay's own requests
// filled (nonceStash.setAside).
type contextRecording struct {
	base  http.RoundTripper
	stash *nonceStash
}

func (t contextRecording) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil {
		t.stash.setAside(req, resp)
	}
	if rec, ok := req.Context().Value(recorderKey{}).(*recorder); ok {
		rec.note(resp, err)
	}
	return resp, err
}

func (r *recorder) lastResponse() response {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an
// HTTP-date (RFC 9110 §10.2.3), capped at maxRetryAfter. Zero when
// absent, unparsable or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	d, _ := retryafter.Parse(v, now, maxRetryAfter)
	return d
}
