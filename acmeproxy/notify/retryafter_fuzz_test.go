package notify

import (
	"context"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// wantRetryAfter is what a receiver's Retry-After v asks for at now,
// worked out apart from retryAfter: delay-seconds (any number of digits,
// read as a big integer; strconv's one leading sign allowed, a negative
// number being no value), or an HTTP-date in any form http.ParseTime
// knows (a past one meaning now); never more than maxRetryAfter. ok is
// false when v asks for nothing.
func wantRetryAfter(v string, now time.Time) (time.Duration, bool) {
	digits, negative := v, false
	if rest, ok := strings.CutPrefix(v, "+"); ok {
		digits = rest
	} else if rest, ok := strings.CutPrefix(v, "-"); ok {
		digits, negative = rest, true
	}
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		n, _ := new(big.Int).SetString(digits, 10)
		switch {
		case n.Sign() == 0:
			return 0, true
		case negative:
			return 0, false
		case n.Cmp(big.NewInt(int64(maxRetryAfter/time.Second))) >= 0:
			return maxRetryAfter, true
		}
		return time.Duration(n.Int64()) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// FuzzRetryAfter checks the reading of a webhook receiver's Retry-After:
// never a panic, never a negative wait nor one above maxRetryAfter, and
// exactly the wait the header asks for.
func FuzzRetryAfter(f *testing.F) {
	for _, v := range []string{
		"", "0", "1", "30", "3599", "3600", "3601", "-5", "+5", "-0", "+", "00030", " 30", "1e3", "soon",
		"9223372036",           // the most seconds a time.Duration holds
		"9223372037",           // one more: wrapped round, negative
		"18446744074",          // wrapped round twice: a third of a second
		"99999999999999999999", // beyond int64
		"-99999999999999999999",
		"99999999999999999999A",
		"Thu, 01 Jan 2026 00:02:00 GMT",    // IMF-fixdate, two minutes on
		"Thursday, 01-Jan-26 00:02:00 GMT", // RFC 850
		"Thu Jan  1 00:02:00 2026",         // asctime
		"Wed, 31 Dec 2025 23:00:00 GMT",    // past
		"Thu, 01 Jan 2026 01:00:01 GMT",    // an hour and a second on
		"Fri, 31 Dec 9999 23:59:59 GMT",    // beyond what a time.Duration holds
	} {
		f.Add(v, int64(1767225600)) // 2026-01-01T00:00:00Z
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		now := time.Unix(int64(uint32(nowUnix)), 0).UTC()
		got, ok := retryAfter(v, now)
		if got < 0 || got > maxRetryAfter {
			t.Fatalf("Retry-After %q at %s = %s: outside [0, %s]", v, now, got, maxRetryAfter)
		}
		if !ok && got != 0 {
			t.Errorf("Retry-After %q at %s: no value, yet %s", v, now, got)
		}
		if want, wantOK := wantRetryAfter(v, now); got != want || ok != wantOK {
			t.Errorf("Retry-After %q at %s = %s, %t; want %s, %t", v, now, got, ok, want, wantOK)
		}
	})
}

// A receiver answering 429 with a Retry-After too large for a
// time.Duration asks for a long wait: the delivery waits the cap, not
// no time at all (which, spending no attempt, would send the request
// again at once, again and again until the job's deadline).
func TestA429WithAHugeRetryAfterWaitsForTheCap(t *testing.T) {
	for _, v := range []string{"3601", "9223372037", "18446744074", "99999999999999999999"} {
		t.Run(v, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", v)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			t.Cleanup(srv.Close)
			dst := Destination{Type: TypeWebhook, URL: srv.URL}
			d := NewDeliverer(Options{})
			if err := d.Register(dst); err != nil {
				t.Fatal(err)
			}
			ev := Event{Event: acme.EventCertificateIssued, Profile: "internal", Time: time.Now().UTC()}
			job := &jobs.Job{ID: 1, Kind: Kind, Payload: Jobs([]Destination{dst}, ev)[0].Payload}
			out := d.Run(context.Background(), job)
			if got, want := out.String(), "retry after "+maxRetryAfter.String()+": "; !strings.HasPrefix(got, want) {
				t.Errorf("outcome %q; want it to start %q", got, want)
			}
		})
	}
}
