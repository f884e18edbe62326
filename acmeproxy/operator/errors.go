package operator

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/textcut"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// storeWords are the store's sentinel texts, which an operator error
// carries for errors.Is but which say nothing to the operator reading it.
var storeWords = []error{store.ErrNotFound, store.ErrWrongState, store.ErrConflict}

// Describe classifies an error of this package for the operator's two
// fronts, the admin API and the web page: the HTTP status it answers, and
// its message in the operator's terms — "conflict: cannot cancel job 5: it
// is done", not "conflict: store: wrong state: cannot cancel job 5: it is
// done". Status 0 is a server fault: its message is for the log, not the
// operator.
func Describe(err error) (status int, message string) {
	var word string
	switch {
	case errors.Is(err, store.ErrNotFound):
		status, word = http.StatusNotFound, "not found"
	case errors.Is(err, ErrInvalid):
		status, word = http.StatusBadRequest, ErrInvalid.Error()
	case errors.Is(err, ErrConflict):
		status, word = http.StatusConflict, ErrConflict.Error()
	case errors.Is(err, ErrBackendFailed):
		status, word = http.StatusBadGateway, ErrBackendFailed.Error()
	case errors.Is(err, ErrNotMounted):
		return http.StatusServiceUnavailable, err.Error()
	case store.IsUnavailable(err), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "the database cannot take writes or does not answer now; retry later"
	case errors.Is(err, signer.ErrIssuerUnavailable):
		// The CA's key is in storage that failed, or (a front end) not
		// published yet by an instance holding it: as the ACME front
		// tells a client, asking later may succeed. The storage's own
		// error is the log's.
		return http.StatusServiceUnavailable, "the issuing CA's key cannot be reached now, so nothing was changed; retry later"
	default:
		return 0, err.Error()
	}
	msg := err.Error()
	for _, s := range storeWords {
		msg = strings.ReplaceAll(msg, s.Error()+": ", "")
	}
	return status, word + ": " + strings.TrimPrefix(msg, word+": ")
}

// RequestDeadline bounds each request of the operator's fronts, so that a
// database that does not answer is a 503 rather than a hung CLI or page;
// minutes, not the ACME front's seconds, for the bulk changes an operator
// makes (an audit prune of millions of rows, a renew-early of an issuer).
const RequestDeadline = 5 * time.Minute

// UnavailableRetryAfter is the Retry-After of the operator's fronts' 503
// (the database out of reach, or slower than RequestDeadline): when a
// script, the CLI or a person may ask again, as the ACME front says.
const UnavailableRetryAfter = 30 * time.Second

// MaxID bounds the ids the operator's fronts (the admin API, the web page)
// take in their paths: orders', accounts' and EAB keys' ids are tens of
// bytes, job ids digits, profile names at most 63. A longer one is
// answered not found without being echoed.
const MaxID = 256

// Clip shortens what a request sent to a length fit for an error message
// (128 bytes), cut at a character boundary and marked with "…".
func Clip(s string) string {
	return textcut.Clip(s, 128, "…")
}
