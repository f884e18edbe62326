package acmeproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"database/sql"
	"testing"
	"time"

	vocab "github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// The summary of refusals nobody else records lives in memory until it is
// written: a flush whose write fails (the database busy or away for a
// moment) must keep it for the next flush, not drop it, and a later flush
// writes it once. SQLite only: the failure is another connection holding
// the database's write lock past the store's busy timeout.
func TestARefusalSummaryWhoseWriteFailedIsWrittenOnceByTheNextFlush(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := clocktest.New(time.Now())
	place := filepathPlace(t)
	e := newTestEnvWith(t, envOptions{dbPath: place, sqlite: store.SQLiteOptions{BusyTimeout: 50 * time.Millisecond},
		opts: func(o *Options) { o.Clock = clk }})
	e.runner.Stop() // nothing else writes meanwhile
	summaries := func() int {
		return len(auditRows(t, e.db, store.AuditFilter{Event: vocab.EventRevocationRefusals, Limit: 100}))
	}

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if r := e.rawClient().postAs("stranger/1.0", e.url("/revoke-cert"), []byte("not json"), jwsOpts{embedJWK: true, key: key}); r.problem == nil {
		t.Fatalf("a stranger's revocation: %d %s; want it refused", r.status, r.body)
	}
	clk.Advance(authority.RefusalInterval)

	lock, err := sql.Open("sqlite", "file:"+place)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	conn, err := lock.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	e.srv.Authority().FlushRefusals(ctx, false)
	if n := summaries(); n != 0 {
		t.Fatalf("%d summary rows written while the database was locked", n)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	e.srv.Authority().FlushRefusals(ctx, false)
	e.srv.Authority().FlushRefusals(ctx, false)
	if n := summaries(); n != 1 {
		t.Fatalf("%d summary rows after the database answered again; want the one whose write failed", n)
	}
}

// filepathPlace is a SQLite place for a test that locks the file itself.
func filepathPlace(t *testing.T) string {
	t.Helper()
	return testDialects[0].place(t)
}
