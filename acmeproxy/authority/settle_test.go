package authority

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/problem"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An order's failed issuance and its certificate_issue_failed audit row
// (with its notifications) are one write. Written apart, a crash or a
// database outage between the two left an invalid order whose failure
// the audit trail never heard of; now a write that cannot be completed
// leaves the order processing, unaudited, and the retry (the signer's
// job, the resume sweep) records both, once.
func TestAFailedIssuanceIsNeverRecordedWithoutItsAuditRow(t *testing.T) {
	tests := []struct {
		name string
		fail func(ctx context.Context, au *Authority, o store.Order) error
	}{
		{"a signer that gave up later", func(ctx context.Context, au *Authority, o store.Order) error {
			return au.Failed(ctx, o.ID, "the script exited 1")
		}},
		{"a signer that refused later", func(ctx context.Context, au *Authority, o store.Order) error {
			return au.Refused(ctx, o.ID, &signer.Error{Kind: signer.KindBadCSR}, "the key is too weak")
		}},
		{"a verdict at finalize", func(ctx context.Context, au *Authority, o store.Order) error {
			au.failOrder(ctx, o, problem.BadCSRF("refused"), "refused", Client{})
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktest.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			path := filepath.Join(t.TempDir(), "acme.db")
			db, err := store.OpenSQLite(ctx, path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			au, err := New(Config{Profile: "test"}, Options{DB: db, Queue: jobs.NewQueue(db, nil), Signer: stubSigner{}, Validator: stubValidator{},
				Clock: clk, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { raw.Close() })
			exec := func(stmt string, args ...any) {
				t.Helper()
				if _, err := raw.Exec(stmt, args...); err != nil {
					t.Fatal(err)
				}
			}
			acct, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: "k", KeyJWK: []byte(`{}`)}, Client{})
			if err != nil {
				t.Fatal(err)
			}
			o, err := au.CreateOrder(ctx, acct.ID, []acme.Identifier{{Type: acme.IdentifierDNS, Value: "a.example.com"}}, []bool{false}, time.Time{}, time.Time{}, "", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			exec(`UPDATE orders SET status = 'ready' WHERE id = ?`, o.ID)
			if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), store.OrderClient{}, "", clk.Now()); err != nil || !won {
				t.Fatalf("claim: %v %v", won, err)
			}
			state := func() (acme.Status, int) {
				t.Helper()
				cur, err := db.GetOrder(ctx, "test", o.ID)
				if err != nil {
					t.Fatal(err)
				}
				return cur.Status, len(auditRows(t, db, store.AuditFilter{Event: acme.EventCertificateIssueFailed, OrderID: o.ID}))
			}

			// The audit row cannot be written (the database went away
			// between the two writes, as far as the order is concerned).
			exec(`CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'audit refused'); END`)
			_ = tc.fail(ctx, au, o)
			if st, rows := state(); st != acme.StatusProcessing || rows != 0 {
				t.Fatalf("after a failure whose audit row could not be written: the order is %s with %d audit rows; want processing with none", st, rows)
			}

			exec(`DROP TRIGGER refuse_audit`)
			if err := tc.fail(ctx, au, o); err != nil {
				t.Fatal(err)
			}
			if st, rows := state(); st != acme.StatusInvalid || rows != 1 {
				t.Errorf("after the retry: the order is %s with %d audit rows; want invalid with one", st, rows)
			}
		})
	}
}
