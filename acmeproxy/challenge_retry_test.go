package acmeproxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
)

// faultingDNS01 is a validator whose dns-01 attempts fail on our side
// (as when no resolver answers) the first faults times, then find the
// answer.
type faultingDNS01 struct {
	authority.Validator
	faults int64
	calls  atomic.Int64
}

func (v *faultingDNS01) DNS01(context.Context, string, string) error {
	if v.calls.Add(1) <= v.faults {
		return errors.New("validate: querying TXT: no resolver answered")
	}
	return nil
}

// RFC 8555 §8.2: while the server retries a validation whose attempt
// failed (here on its own side), the challenge stays processing, its
// "error" says an attempt failed, and Retry-After points past the next
// attempt, on the challenge and on its authorization; an attempt that
// then succeeds leaves a valid challenge with no error.
func TestAChallengeBeingRetriedSaysSoInItsErrorAndRetryAfter(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name    string
			faults  int64
			backoff time.Duration
		}{
			{"while it waits for its next attempt", 1 << 30, time.Minute},
			{"once an attempt succeeds", 2, 50 * time.Millisecond}, // the POST's and the job's first
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				v := &faultingDNS01{faults: tc.faults}
				e := newTestEnvWith(t, envOptions{
					opts:   func(o *Options) { v.Validator = o.Validator; o.Validator = v },
					runner: jobs.RunnerOptions{BackoffBase: tc.backoff, BackoffCap: tc.backoff},
				})
				alice := e.rawClient()
				alice.register()
				o := alice.order(dnsID("retried.example.com"))
				ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
				if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status != http.StatusOK {
					t.Fatalf("challenge POST: %d %s", r.status, r.body)
				}
				if tc.faults < 1<<30 {
					alice.await(o.Authorizations[0], "valid")
					if c := decodeAs[challengeJSON](t, alice.read(ch.URL)); c.Status != acme.StatusValid || len(c.Error) != 0 {
						t.Errorf("after a successful attempt the challenge is %s with error %s; want valid with none", c.Status, c.Error)
					}
					return
				}
				for _, read := range []struct{ what, url string }{{"challenge", ch.URL}, {"authorization", o.Authorizations[0]}} {
					r := alice.read(read.url)
					secs, err := strconv.Atoi(r.header.Get("Retry-After"))
					if err != nil || secs < int(tc.backoff*8/10/time.Second) {
						t.Errorf("the %s says Retry-After %q; want about the backoff, %v", read.what, r.header.Get("Retry-After"), tc.backoff)
					}
				}
				c := decodeAs[challengeJSON](t, alice.read(ch.URL))
				if c.Status != acme.StatusProcessing {
					t.Fatalf("the challenge is %s, want processing", c.Status)
				}
				var p problem.Problem
				if err := json.Unmarshal(c.Error, &p); err != nil || p.Type != acme.ErrorServerInternal {
					t.Errorf("the processing challenge's error is %s; want a serverInternal problem saying an attempt failed", c.Error)
				}
			})
		}
	})
}
