package acmeproxy

import (
	"context"
	"net/http"
	"path"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A challenge made invalid without its answer judged — its validation
// failed on our side until its attempts were spent, or its authorization
// expired before the validation ran — makes the order invalid, and the
// audit trail says why: one challenge_failed row, by the account, naming
// the order and the identifier, whose reason (serverInternal,
// unauthorized) tells it from a wrong answer.
func TestAChallengeMadeInvalidWithoutItsAnswerJudgedIsAuditedAsFailed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		tests := []struct {
			name       string
			expire     bool // the authorization expires before a retried attempt runs
			wantReason string
		}{
			{"its attempts spent on faults of ours", false, string(acme.ErrorServerInternal)},
			{"its authorization expired before the validation ran", true, string(acme.ErrorUnauthorized)},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				v := &faultingDNS01{faults: 1 << 30}
				clk := clocktest.New(time.Now())
				backoff := 5 * time.Millisecond
				if tc.expire {
					backoff = time.Hour // the job waits; the test runs the attempt
				}
				e := newTestEnvWith(t, envOptions{
					opts: func(o *Options) {
						v.Validator = o.Validator
						o.Validator = v
						if tc.expire {
							o.Clock = clk
						}
					},
					runner: jobs.RunnerOptions{BackoffBase: backoff, BackoffCap: backoff},
				})
				alice := e.rawClient()
				alice.register()
				acct := path.Base(alice.kid)
				o := alice.order(dnsID("unjudged.example.com"))
				ch := challengeOf(t, alice.authz(o.Authorizations[0]), acme.ChallengeDNS01)
				if r := alice.post(ch.URL, map[string]any{}, jwsOpts{}); r.status != http.StatusOK {
					t.Fatalf("challenge POST: %d %s", r.status, r.body)
				}
				if tc.expire {
					clk.Advance(authority.OrderLifetime + time.Minute)
					if out := e.srv.Authority().RunValidation(ctx, path.Base(ch.URL), authority.Client{}); out.Kind() != "done" {
						t.Fatalf("the attempt after the expiry: %v, want done", out)
					}
				}
				alice.await(ch.URL, "invalid")

				rows := auditRows(t, e.db, store.AuditFilter{Event: acme.EventChallengeFailed})
				if len(rows) != 1 {
					t.Fatalf("%d challenge_failed rows, want 1: %+v", len(rows), rows)
				}
				row := rows[0]
				if row.Reason != tc.wantReason || row.ActorID != acct || row.AccountID != acct || row.OrderID != path.Base(o.url) ||
					len(row.Identifiers) != 1 || row.Identifiers[0].Value != "unjudged.example.com" {
					t.Errorf("challenge_failed row %+v; want reason %s, by and of account %s, in order %s, naming unjudged.example.com",
						row, tc.wantReason, acct, path.Base(o.url))
				}
			})
		}
	})
}
