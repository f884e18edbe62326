package store

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// Text from outside — a client's User-Agent (HTTP lets a header carry
// Latin-1 bytes), a signer's stderr cut inside a character, a NUL — is
// stored as valid text in both dialects. PostgreSQL refused such a string
// in a text column: the account's creation or the finalize failed with a
// 500 for that client, a failed order's record at every try.
func TestTextFromOutsideThatIsNotUTF8IsStoredAsValidText(t *testing.T) {
	tests := []struct {
		name string
		s    string
	}{
		{"a Latin-1 byte", "curl/8 caf\xe9"},
		{"a character cut in two", "Zertifikat ung\xc3"},
		{"a NUL byte", "bad\x00agent"},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				db := openTest(t)
				check := func(what, got string) {
					t.Helper()
					if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || !strings.HasPrefix(got, tc.s[:3]) {
						t.Errorf("%s stored as %q; want valid text without NUL", what, got)
					}
				}

				ev := AuditEvent{At: t0, Event: "account_created", Outcome: "success", Profile: "p", UserAgent: tc.s, Detail: tc.s}
				if err := db.InsertAudit(ctx, ev); err != nil {
					t.Fatalf("the audit row: %v", err)
				}
				evs, err := db.SearchAudit(ctx, AuditFilter{Event: "account_created"})
				if err != nil || len(evs) != 1 {
					t.Fatalf("reading the audit row: %v %d", err, len(evs))
				}
				check("the audit row's User-Agent", evs[0].UserAgent)
				check("the audit row's detail", evs[0].Detail)

				o := newOrderWithAuthzs(t, db, 1)
				if _, err := rawW(db).Exec(`UPDATE orders SET status = 'ready' WHERE id = ?`, o.ID); err != nil {
					t.Fatal(err)
				}
				if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), OrderClient{UserAgent: tc.s}, "", t0); err != nil || !won {
					t.Fatalf("the finalize's claim: %v %v", won, err)
				}
				if err := db.FailOrder(ctx, o.ID, nil, tc.s, t0); err != nil {
					t.Fatalf("the order's failure: %v", err)
				}
				got, err := db.GetOrder(ctx, "p", o.ID)
				if err != nil {
					t.Fatal(err)
				}
				check("the finalizing client's User-Agent", got.Client.UserAgent)
			})
		}
	})
}
