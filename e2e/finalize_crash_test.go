//go:build unix

package e2e

import (
	"context"
	"database/sql"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to hold a lock and watch the orders from outside

	xacme "golang.org/x/crypto/acme"
)

// TestCaddyKilledMidFinalizeFinishesTheOrderWithinAMinuteOfItsRestart
// runs one built Caddy on PostgreSQL, holds the finalize of an order
// after its claim (the order processing) and before its certificate is
// stored — the test locks the certificates table, so the insert waits —
// kills the process with SIGKILL there, starts the same binary on the
// same data directory and config, and has the client, which saw its
// finalize cut, poll the order: it must be valid, with one certificate,
// well within the 90 s certbot waits for a processing order, rather than
// after the resume sweep's StuckAfter (README, Durability).
func TestCaddyKilledMidFinalizeFinishesTheOrderWithinAMinuteOfItsRestart(t *testing.T) {
	f, dir := newFleet(t, "127.0.0.1")
	in := &fleetInstance{name: "A", ip: "127.0.0.1", adminPort: freePortOn(t, "127.0.0.1"), storage: filepath.Join(dir, "a")}
	f.inst[0] = in
	f.start(t, in)
	t.Cleanup(func() {
		if in.running() {
			in.proc.stop()
		}
	})

	db, err := sql.Open("pgx", f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	c, _ := f.client(t, f.transport(in), "internal")
	const name = "cut.example.com"
	order, err := f.authorize(ctx, c, name)
	if err != nil {
		t.Fatal(err)
	}
	id := path.Base(order.URI)

	// The certificate's insert waits for this lock; the claim before it
	// does not.
	lock, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `LOCK TABLE certificates IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	finalized := make(chan error, 1)
	go func() {
		_, _, err := c.CreateOrderCert(ctx, order.FinalizeURL, csrFor(t, name), true)
		finalized <- err
	}()
	var status, claimer string
	for deadline := time.Now().Add(30 * time.Second); ; {
		var waiting bool
		err := db.QueryRowContext(ctx, `SELECT o.status, COALESCE(o.claimed_by, ''),
				EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO certificates%')
			FROM orders o WHERE o.id = $1`, id).Scan(&status, &claimer, &waiting)
		if err != nil {
			t.Fatal(err)
		}
		if status == "processing" && waiting {
			break
		}
		select {
		case err := <-finalized:
			t.Fatalf("the finalize answered (%v) before it reached the certificate's insert; the order is %s", err, status)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the finalize did not reach the certificate's insert within 30s: the order is %s", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if claimer == "" {
		t.Errorf("the claim recorded no claimer")
	}
	f.kill(t, in)
	if err := <-finalized; err == nil {
		t.Fatal("the finalize was answered although its process was killed before it stored the certificate")
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}

	f.start(t, in)
	restarted := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	got, err := c.WaitOrder(wctx, order.URI)
	if err != nil {
		var st string
		db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = $1`, id).Scan(&st)
		t.Fatalf("the order cut by the crash, 90s after the restart: %v (it is %s); want valid within 90s", err, st)
	}
	if got.Status != xacme.StatusValid {
		t.Fatalf("the order is %s after the restart; want valid", got.Status)
	}
	t.Logf("valid %s after the restart", time.Since(restarted).Round(time.Millisecond))
	chain, err := c.FetchCert(ctx, got.CertURL, true)
	if err != nil {
		t.Fatal(err)
	}
	verifyChain(t, chain, f.caPool, name)
	var certs int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM certificates WHERE order_id = $1`, id).Scan(&certs); err != nil || certs != 1 {
		t.Errorf("%d certificates stored for the order (%v); want one", certs, err)
	}
	if out := in.proc.out.String(); !strings.Contains(out, "resuming an order whose claimer has exited") {
		t.Errorf("the restarted process did not log the resume of its predecessor's order:\n%s", out)
	}
}
