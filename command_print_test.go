package caddyacmeproxy

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/operator"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A client chooses some of what an audit row says — the key id of an
// external account binding it sent, say, refused and audited as it was
// sent — and the CLI prints it in the operator's terminal. Whatever the
// client put there prints as one row of plain text: no escape sequence
// reaches the terminal (to recolour it, retitle it, erase the rows above),
// no line break forges a row of its own, no tab shifts the columns, no
// bidirectional override reorders the row, and the operator sees each of
// them written out.
func TestTheCLIPrintsWhatAClientSentAsOneRowOfPlainText(t *testing.T) {
	tests := []struct {
		name string
		kid  string
		want string // how the row shows it
	}{
		{"an escape sequence is written out, not sent to the terminal", "k\x1b[2K\x1b[1Aok", `k\x1b[2K\x1b[1Aok`},
		{"a line break does not forge a row of its own", "k\n99  2026-01-01 00:00:00  certificate_revoked", `k\n99  2026-01-01 00:00:00  certificate_revoked`},
		{"a carriage return does not overwrite the row", "k\rforged", `k\rforged`},
		{"a tab does not shift the columns", "k\tx", `k\tx`},
		{"an 8-bit control sequence is written out", "k\u009b2Jx", `k\u009b2Jx`},
		{"a bidirectional override does not reorder the row", "k\u202eabc", `k\u202eabc`},
		{"a byte that is not UTF-8 shows as the replacement character", "k\xffx", "k\uFFFDx"},
		{"plain text is printed as it is", "kid-ÄÖ_1", "kid-ÄÖ_1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := db.InsertAudit(ctx, store.AuditEvent{At: time.Now(), Event: "account_binding_refused", Outcome: "refused",
				Profile: "p", ActorKind: "account_key", ActorID: "tp", Reason: tt.kid}); err != nil {
				t.Fatal(err)
			}
			ts := adminServer(t, db)
			out, err := runCLI("audit", "--address", ts.Listener.Addr().String())
			if err != nil {
				t.Fatalf("audit: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 {
				t.Errorf("the table has %d lines, want a header and one row:\n%s", len(lines), out)
			}
			if !utf8.ValidString(out) {
				t.Errorf("the table is not UTF-8: %q", out)
			}
			for _, r := range strings.ReplaceAll(out, "\n", "") {
				if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
					t.Errorf("the table holds %U: %q", r, out)
				}
			}
			if !strings.Contains(lines[len(lines)-1], tt.want) {
				t.Errorf("the row does not show %s:\n%s", tt.want, out)
			}
		})
	}
}

// A certificate chain is the one multi-line text the CLI prints: its
// lines stay lines.
func TestTheCLIKeepsAChainsLines(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	o := operator.OrderView{ID: "o\n1", Certificate: &operator.CertificateView{ChainPEM: pem}}
	printable(&o)
	if o.Certificate.ChainPEM != pem {
		t.Errorf("the chain became %q", o.Certificate.ChainPEM)
	}
	if o.ID != `o\n1` {
		t.Errorf("the order id became %q, want it written out on one line", o.ID)
	}
}
