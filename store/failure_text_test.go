package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// What a row keeps for the operator about a failure — a job's last error,
// an order's failure detail, a relay order's detail — quotes what an
// outside party answered (an upstream CA's Location or problem, an SMTP
// server's reply line, a program's stderr): it is kept cut to its bound,
// however much that party sent, at every retry.
func TestAFailuresTextIsStoredCutToItsBound(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		huge := "upstream said: " + strings.Repeat("é", 1<<20) // 2 MiB, cut inside no character
		tests := []struct {
			name  string
			write func(t *testing.T) string // writes huge, returns what is read back
		}{
			{"a retried job's last error", func(t *testing.T) string {
				j, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k-retry", MaxAttempts: 3}, t0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.ClaimJobs(ctx, "k-retry", "me", t0, t0.Add(time.Minute), 1); err != nil {
					t.Fatal(err)
				}
				if _, err := db.RetryJob(ctx, j.ID, "me", t0.Add(time.Minute), huge, false, t0); err != nil {
					t.Fatal(err)
				}
				got, err := db.GetJob(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				return got.LastError
			}},
			{"a retired job's last error", func(t *testing.T) string {
				j, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k-retire", MaxAttempts: 3}, t0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.ClaimJobs(ctx, "k-retire", "me", t0, t0.Add(time.Minute), 1); err != nil {
					t.Fatal(err)
				}
				if err := db.RetireJob(ctx, j.ID, "me", JobFailed, huge, t0); err != nil {
					t.Fatal(err)
				}
				got, err := db.GetJob(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				return got.LastError
			}},
			{"a failed order's detail", func(t *testing.T) string {
				o := processingOrder(t, db)
				if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}}, t0); err != nil {
					t.Fatal(err)
				}
				if err := db.FailOrder(ctx, o.ID, nil, huge, t0); err != nil {
					t.Fatal(err)
				}
				r, err := db.GetRelayOrder(ctx, o.ID)
				if err != nil {
					t.Fatal(err)
				}
				return r.FailureDetail
			}},
			{"an audited failed order's detail", func(t *testing.T) string {
				o := processingOrder(t, db)
				if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}}, t0); err != nil {
					t.Fatal(err)
				}
				ev := AuditEvent{At: t0, Event: "certificate_issue_failed", Outcome: "failure", Profile: "p", OrderID: o.ID}
				if err := db.FailOrderAudited(ctx, o.ID, nil, huge, ev, t0); err != nil {
					t.Fatal(err)
				}
				r, err := db.GetRelayOrder(ctx, o.ID)
				if err != nil {
					t.Fatal(err)
				}
				return r.FailureDetail
			}},
			{"a settled relay order's detail", func(t *testing.T) string {
				o := processingOrder(t, db)
				if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}}, t0); err != nil {
					t.Fatal(err)
				}
				if err := db.SettleRelayOrder(ctx, o.ID, RelayInvalid, huge, t0); err != nil {
					t.Fatal(err)
				}
				r, err := db.GetRelayOrder(ctx, o.ID)
				if err != nil {
					t.Fatal(err)
				}
				return r.Detail
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				checkClipped(t, tc.name, huge, tc.write(t), FailureTextMax)
			})
		}
	})
}
