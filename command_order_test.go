package caddyacmeproxy

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// `caddy acme-proxy orders show` names the certificate an order replaces
// (RFC 9773 §5), as the admin API's order does; an order that replaces
// nothing has no such line.
func TestOrdersShowNamesTheCertificateAnOrderReplaces(t *testing.T) {
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
	const certID = "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"
	order := func(replaces string) string {
		t.Helper()
		o, err := db.CreateOrder(ctx, store.Order{Profile: "p", AccountID: acct.ID, Replaces: replaces,
			Identifiers: []acme.Identifier{{Type: "dns", Value: "www.example.com"}}, Expires: now.Add(time.Hour)}, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		return o.ID
	}
	renewal, first := order(certID), order("")
	ts := adminServer(t, db)
	line := regexp.MustCompile(`(?m)^replaces:\s+(\S+)$`)
	out, err := runCLI("orders", "show", renewal, "--address", ts.Listener.Addr().String())
	if err != nil {
		t.Fatalf("orders show %s: %v\n%s", renewal, err, out)
	}
	if m := line.FindStringSubmatch(out); m == nil || m[1] != certID {
		t.Errorf("orders show of the renewal says %v, want a line replaces: %s:\n%s", m, certID, out)
	}
	out, err = runCLI("orders", "show", first, "--address", ts.Listener.Addr().String())
	if err != nil {
		t.Fatalf("orders show %s: %v\n%s", first, err, out)
	}
	if line.MatchString(out) {
		t.Errorf("orders show of an order that replaces nothing has a replaces line:\n%s", out)
	}
}
