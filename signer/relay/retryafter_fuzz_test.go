package relay

import (
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mholt/acmez/v3/acme"
)

// isDigits reports whether s is 1*DIGIT, the delay-seconds of RFC 9110
// §10.2.3.
func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// wantRetryAfter is what an upstream's Retry-After v asks for at now,
// worked out apart from parseRetryAfter: delay-seconds (with any number
// of digits, read as a big integer), or an HTTP-date in any of the three
// forms http.ParseTime knows; zero when absent, unparsable, zero or
// past; never more than maxRetryAfter. A single leading "+" or "-" is
// read as a sign (strconv's leniency; a negative delay is zero).
func wantRetryAfter(v string, now time.Time) time.Duration {
	digits, negative := v, false
	if rest, ok := strings.CutPrefix(v, "+"); ok {
		digits = rest
	} else if rest, ok := strings.CutPrefix(v, "-"); ok {
		digits, negative = rest, true
	}
	if isDigits(digits) {
		n, _ := new(big.Int).SetString(digits, 10)
		if negative || n.Sign() == 0 {
			return 0
		}
		if n.Cmp(big.NewInt(int64(maxRetryAfter/time.Second))) >= 0 {
			return maxRetryAfter
		}
		return time.Duration(n.Int64()) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// FuzzParseRetryAfter checks the reading of an upstream's Retry-After:
// never a panic, never a negative delay, never more than maxRetryAfter
// however large the number or far the date, and exactly the delay the
// header asks for.
func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{
		"", "0", "1", "30", "120", "86399", "86400", "86401",
		"-5", "+5", "-0", "+", "-", "00030", " 30", "30 ", "1e3", "0x10", "3.5", "soon",
		"9223372036",           // the most seconds a time.Duration holds
		"9223372037",           // one more: wrapped round, negative
		"18446744074",          // wrapped round twice: a third of a second
		"99999999999999999999", // beyond int64
		"-99999999999999999999",
		"+99999999999999999999",
		"99999999999999999999A", // not a number, though too large before the A
		"99999999999999999999-",
		"+-5",
		"Thu, 01 Jan 2026 00:02:00 GMT",    // IMF-fixdate, two minutes on
		"Thursday, 01-Jan-26 00:02:00 GMT", // RFC 850
		"Thu Jan  1 00:02:00 2026",         // asctime
		"Wed, 31 Dec 2025 23:00:00 GMT",    // past
		"Thu, 01 Jan 2026 00:00:00 GMT",    // now
		"Fri, 02 Jan 2026 00:00:01 GMT",    // a day and a second on
		"Fri, 31 Dec 9999 23:59:59 GMT",    // beyond what a time.Duration holds
		"Thu, 01 Jan 2026 00:02:00 UTC",    // not GMT
		"Thu, 32 Jan 2026 00:02:00 GMT",    // no such day
	} {
		f.Add(v, int64(1767225600)) // 2026-01-01T00:00:00Z
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		// Any instant from 1970 to 2106.
		now := time.Unix(int64(uint32(nowUnix)), 0).UTC()
		got := parseRetryAfter(v, now)
		if got < 0 {
			t.Fatalf("Retry-After %q at %s = %s: negative", v, now, got)
		}
		if got > maxRetryAfter {
			t.Errorf("Retry-After %q at %s = %s: more than the cap %s", v, now, got, maxRetryAfter)
		}
		if want := wantRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q at %s = %s; want %s", v, now, got, want)
		}
	})
}

// An upstream that rate-limits with a Retry-After too large for a
// time.Duration means "not for a long time": the profile cools down for
// the cap, not for a moment (18446744074 s wrapped round to 0.29 s) nor
// for the default minute (a number beyond int64 was read as no value).
func TestAHugeRetryAfterCoolsTheProfileDownForTheCap(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, v := range []string{"86401", "9223372037", "18446744074", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run(v, func(t *testing.T) {
			last := response{status: http.StatusTooManyRequests, retryAfter: parseRetryAfter(v, now)}
			f := noSecrets.classify(acme.Problem{Type: acme.ProblemTypeRateLimited, Status: http.StatusTooManyRequests}, last)
			if f.verdict != coolDown || f.after != maxRetryAfter {
				t.Errorf("Retry-After %q: %s for %s; want %s for %s", v, f.verdict, f.after, coolDown, maxRetryAfter)
			}
		})
	}
}
