package caddyacmeproxy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
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

// An order's problem is the one answer the CLI prints as the admin API's
// JSON rather than as decoded strings, and a client chooses parts of it: a
// failed http-01 challenge's problem, which becomes its order's, names the
// host of a redirect its server sent, and a host may hold any character
// from U+0080 on — an 8-bit control sequence (CSI, U+009B) or a
// bidirectional override. `orders show` prints the problem on its line as
// plain text, those characters written out.
func TestOrdersShowPrintsAClientChosenProblemAsPlainText(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Now()
	acct, _, err := db.CreateAccount(ctx, store.Account{Profile: "p", Thumbprint: "tp", KeyJWK: []byte(`{}`)}, now)
	if err != nil {
		t.Fatal(err)
	}
	o, err := db.CreateOrder(ctx, store.Order{Profile: "p", AccountID: acct.ID,
		Identifiers: []acme.Identifier{{Type: "dns", Value: "www.example.com"}}, Expires: now.Add(time.Hour)}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	detail := "fetching http://www.example.com/.well-known/acme-challenge/t: a redirect to http://x\u009b2J\u009bH\u202eevil:8080 is not allowed"
	doc, err := json.Marshal(map[string]any{"type": "urn:ietf:params:acme:error:connection", "detail": detail, "status": 400})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.FailOrder(ctx, o.ID, doc, "", now); err != nil {
		t.Fatal(err)
	}
	ts := adminServer(t, db)
	out, err := runCLI("orders", "show", o.ID, "--address", ts.Listener.Addr().String())
	if err != nil {
		t.Fatalf("orders show: %v\n%s", err, out)
	}
	for _, r := range strings.ReplaceAll(out, "\n", "") {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			t.Errorf("the output holds %U:\n%q", r, out)
		}
	}
	line := regexp.MustCompile(`(?m)^error:\s+(.*)$`).FindStringSubmatch(out)
	if line == nil || !strings.Contains(line[1], `x\u009b2J\u009bH\u202eevil:8080`) || !strings.Contains(line[1], `"status":400`) {
		t.Errorf("the error line does not show the whole problem on one line, its controls written out:\n%s", out)
	}
}

// The jobs table shortens a job's last error to a column's width; the
// cut falls between characters, so that one written in more than a byte
// (a dash, an ellipsis, as the server's own messages write them) is
// printed whole or not at all, never as half a character.
func TestTheJobsTableCutsALastErrorBetweenCharacters(t *testing.T) {
	ctx := context.Background()
	db, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "acme.db"), store.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Now()
	j, _, err := db.EnqueueJobLeased(ctx, store.NewJob{Kind: "relay_issue", RunAt: now, MaxAttempts: 3}, "me", now.Add(time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	// The column holds 60 bytes: "—" (3 bytes) straddles the cut.
	lastError := strings.Repeat("a", 58) + "— the upstream did not answer"
	if _, err := db.RetryJob(ctx, j.ID, "me", now.Add(time.Hour), lastError, false, now); err != nil {
		t.Fatal(err)
	}
	ts := adminServer(t, db)
	out, err := runCLI("jobs", "--address", ts.Listener.Addr().String())
	if err != nil {
		t.Fatalf("jobs: %v\n%s", err, out)
	}
	if !utf8.ValidString(out) {
		t.Errorf("the table is not UTF-8: %q", out)
	}
	if !strings.Contains(out, strings.Repeat("a", 58)+"…") {
		t.Errorf("the table does not show the last error cut before the dash:\n%s", out)
	}
}
