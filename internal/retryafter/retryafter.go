// Package retryafter reads an HTTP Retry-After header (RFC 9110 §10.2.3)
// for the clients in this module that honour one: the relay's upstream
// CA and the webhook receivers of notifications. One parser, because
// the hard part — a delay too large for an int, or large enough to wrap
// a time.Duration round to a short or negative one — is the same for
// both.
package retryafter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse reads v, delta-seconds or an HTTP-date, as a wait from now,
// capped at limit. ok is false when v is empty or neither form; a date
// in the past, or a zero delay, is a wait of 0 with ok true; a negative
// delay is not a delay (ok false).
func Parse(v string, now time.Time, limit time.Duration) (wait time.Duration, ok bool) {
	if v == "" {
		return 0, false
	}
	secs, err := strconv.Atoi(v)
	if errors.Is(err, strconv.ErrRange) && isNumber(v) {
		// Too large for an int: a very long wait (or, negative, none),
		// not a bad value; Atoi gives the largest (or smallest) int.
		err = nil
	}
	switch {
	case err == nil && secs < 0:
		return 0, false
	case err == nil:
		// Capped before the multiplication, which could wrap round to a
		// negative or a short time.Duration.
		return time.Duration(min(secs, int(limit/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), limit), true
}

// isNumber reports whether s is digits after at most one sign: the form
// strconv.Atoi reads.
func isNumber(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	return s != "" && strings.Trim(s, "0123456789") == ""
}
