package authority

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/internal/incarnation"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// An order left processing by a finalize whose process has exited, as
// this process can tell (a process of this host: see
// ResumeOrphanedOrders), is resumed by this process's next round of
// resuming such orders, at most ResumeEvery away, not by the resume sweep
// StuckAfter after its claim: its client is told to come back by then, not
// when the sweep would take it. A claimer still running, or one this
// process cannot judge, leaves the order to the sweep as before.
func TestAProcessingOrderWhoseClaimerHasExitedTellsTheClientToComeBackByTheNextOrphanRound(t *testing.T) {
	tests := []struct {
		name string
		// claimer registers the process that claimed the order in dir
		// and returns its id.
		claimer func(t *testing.T, dir string) string
		// unregistered: this process has no registration (a system
		// without flock), so it judges no claimer.
		unregistered bool
		after        time.Duration // between the claim and the poll
		want         time.Duration
	}{
		{name: "ok/a claimer that has exited, claimed two minutes ago: by the next round", claimer: exited,
			after: 2 * time.Minute, want: ResumeEvery},
		{name: "ok/a claimer that has exited, the sweep sooner than a round: until the sweep", claimer: exited,
			after: StuckAfter - 30*time.Second, want: 30 * time.Second},
		{name: "ok/a claimer that has exited, just claimed: a second", claimer: exited,
			after: 30 * time.Second, want: time.Second},
		{name: "ok/a claimer still running, claimed two minutes ago: until the sweep takes it", claimer: running,
			after: 2 * time.Minute, want: 3 * time.Minute},
		{name: "ok/no claimer recorded, claimed two minutes ago: until the sweep takes it",
			claimer: func(*testing.T, string) string { return "" },
			after:   2 * time.Minute, want: 3 * time.Minute},
		{name: "ok/a claimer that has exited, this process unregistered: until the sweep takes it", claimer: exited,
			unregistered: true, after: 2 * time.Minute, want: 3 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			// On whole milliseconds, as the store keeps times.
			clk := clocktest.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			dir := t.TempDir()
			var self *incarnation.Registry
			if !tc.unregistered {
				self = incarnation.New(dir, time.Hour)
				if err := self.Register(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { self.Close() })
			}
			path := filepath.Join(t.TempDir(), "acme.db")
			db, err := store.OpenSQLite(ctx, path, store.SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			au, err := New(Config{Profile: "test"}, Options{DB: db, Queue: jobs.NewQueue(db, nil), Signer: stubSigner{}, Validator: stubValidator{},
				Clock: clk, Incarnation: self, LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
			if err != nil {
				t.Fatal(err)
			}
			o := processingOrder(t, au, db, path, tc.claimer(t, dir), clk.Now())
			clk.Advance(tc.after)
			if got := au.ProcessingRetryAfter(ctx, o); got != tc.want {
				t.Errorf("Retry-After %s after the claim: %s; want %s", tc.after, got, tc.want)
			}
		})
	}
}

// exited registers in dir what a process killed with SIGKILL leaves: its
// file, whose lock the kernel dropped with it.
func exited(t *testing.T, dir string) string {
	const id = "host:4242:0123456789abcdef01234567"
	if err := os.WriteFile(filepath.Join(dir, id+".lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// running registers in dir a process that still runs.
func running(t *testing.T, dir string) string {
	live := incarnation.New(dir, time.Hour)
	if err := live.Register(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	return live.Self()
}

// processingOrder is an order of au, on the SQLite file at path, that
// claimer claimed at now, left
// processing with nothing working on it (au's signer signs within the
// request, and did not).
func processingOrder(t *testing.T, au *Authority, db *store.DB, path, claimer string, now time.Time) store.Order {
	t.Helper()
	ctx := context.Background()
	acct, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: "k", KeyJWK: []byte(`{}`)}, Client{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := au.CreateOrder(ctx, acct.ID, []acme.Identifier{{Type: acme.IdentifierDNS, Value: "cut.example.com"}}, []bool{false}, time.Time{}, time.Time{}, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE orders SET status = 'ready' WHERE id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	if won, err := db.ClaimOrderForIssue(ctx, o.ID, []byte("csr"), store.OrderClient{}, claimer, now); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	o, err = db.GetOrder(ctx, "test", o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
