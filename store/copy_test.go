package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// filledSQLite is a SQLite store holding rows in most tables, as a single
// instance that has issued and revoked leaves it.
func filledSQLite(t *testing.T) *DB {
	t.Helper()
	ctx := context.Background()
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "src.db"), SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cert := issuedCert(t, db, "0a0b", t0.Add(48*time.Hour))
	if _, err := revoke(t, db, cert, "issuer-1", 1); err != nil {
		t.Fatal(err)
	}
	relayed := processingOrder(t, db)
	if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: relayed.ID, Profile: "p", CSR: []byte{9, 8, 7}, UserAgent: "lego"}, t0); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, _, err := db.EnqueueJob(ctx, NewJob{Kind: "k", Key: k, Payload: []byte(`{"n":1}`), RunAt: t0, MaxAttempts: 3}, t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Secret(ctx, "nonce_key", 32, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UseNonce(ctx, "n1", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateRelayAccount(ctx, RelayAccount{Upstream: "up", Profile: "p", KeyPEM: "k", Contact: []string{"mailto:a@example.com"}}, t0); err != nil {
		t.Fatal(err)
	}
	auditAt(t, db, t0, t0.Add(time.Second))
	// Two CRLs in parts, the second sharing the first's part between.
	for publisher := byte(1); publisher <= 2; publisher++ {
		publishDER(t, db, func(n int64) []byte { return sharedDER(n, publisher, 2*crlPartSize+100) })
	}
	return db
}

// copyToPostgres copies src into a new PostgreSQL store, and checks that
// each table reports as many rows in the target as in the source.
func copyToPostgres(t *testing.T, src *DB) (*DB, []TableCount) {
	t.Helper()
	dst, err := OpenPostgres(context.Background(), pgtest.DSN(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	counts, err := CopyStore(context.Background(), src, dst)
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	for _, c := range counts {
		if c.Source != c.Dest {
			t.Errorf("%s: %d rows in the source, %d in the target", c.Table, c.Source, c.Dest)
		}
	}
	return dst, counts
}

func TestMigrateStoreCopiesEveryRowOfEveryTableFromSQLiteToPostgreSQL(t *testing.T) {
	ctx := context.Background()
	src := filledSQLite(t)
	dst, counts := copyToPostgres(t, src)
	tables := map[string]int64{}
	for _, c := range counts {
		tables[c.Table] = c.Dest
	}
	// Every table of the schema is in the report (and none twice).
	want := sortedStrings(t, src.r, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations'`)
	if len(counts) != len(want) {
		t.Errorf("copied %d tables; the schema has %d: %v", len(counts), len(want), want)
	}
	for _, n := range want {
		if _, ok := tables[n]; !ok {
			t.Errorf("table %s was not copied", n)
		}
	}
	for _, n := range []string{"accounts", "orders", "authorizations", "challenges", "certificates", "revocations",
		"relay_orders", "jobs", "audit_events", "secrets", "used_nonces", "relay_accounts"} {
		if tables[n] == 0 {
			t.Errorf("table %s: no rows copied; the test fills it", n)
		}
	}

	// The target's planner knows what it holds (CopyStore analyzes it),
	// instead of planning for tables never analyzed.
	if n := plannerRowEstimate(t, dst, "orders"); n != float64(tables["orders"]) {
		t.Errorf("the target's planner estimates %v orders; %d were copied", n, tables["orders"])
	}

	// What was copied reads back through the target's own statements.
	srcJobs, _ := src.ListJobs(ctx, JobFilter{Kind: "k"})
	dstJobs, err := dst.ListJobs(ctx, JobFilter{Kind: "k"})
	if err != nil || len(dstJobs) != len(srcJobs) || len(dstJobs) != 3 {
		t.Fatalf("jobs in the target: %d (%v); want the source's %d", len(dstJobs), err, len(srcJobs))
	}
	for i := range dstJobs {
		if dstJobs[i].ID != srcJobs[i].ID || string(dstJobs[i].Payload) != string(srcJobs[i].Payload) {
			t.Errorf("job %d: %+v, source %+v", i, dstJobs[i], srcJobs[i])
		}
	}
	ra, err := dst.GetRelayAccount(ctx, "up", "p")
	if err != nil || ra.KeyPEM != "k" || len(ra.Contact) != 1 {
		t.Errorf("relay account in the target: %+v %v", ra, err)
	}
	srcCRL, _ := src.GetCRL(ctx, "ca")
	if dstCRL, err := dst.GetCRL(ctx, "ca"); err != nil || dstCRL.Number != srcCRL.Number || !bytes.Equal(dstCRL.DER, srcCRL.DER) {
		t.Errorf("the CRL in the target: %v; want the source's, number %d, byte for byte (its shared part too)", err, srcCRL.Number)
	}
	srcSecret, _ := src.Secret(ctx, "nonce_key", 32, t0)
	dstSecret, err := dst.Secret(ctx, "nonce_key", 32, t0)
	if err != nil || string(dstSecret) != string(srcSecret) {
		t.Errorf("the nonce key was not carried over (%v): nonces minted before the move would be refused", err)
	}
	// A new row of an identity column gets an id after the copied ones.
	j, _, err := dst.EnqueueJob(ctx, NewJob{Kind: "k", Key: "new", RunAt: t0, MaxAttempts: 1}, t0)
	if err != nil {
		t.Fatalf("a new job in the target: %v", err)
	}
	for _, old := range srcJobs {
		if j.ID <= old.ID {
			t.Errorf("the new job got id %d, not after the copied %d", j.ID, old.ID)
		}
	}
}

func TestMigrateStoreRefusesATargetThatHoldsDataAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	src := filledSQLite(t)
	dst, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, _, err := dst.EnqueueJob(ctx, NewJob{Kind: "already", RunAt: t0, MaxAttempts: 1}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyStore(ctx, src, dst); !errors.Is(err, ErrTargetNotEmpty) {
		t.Fatalf("copy into a used database: %v; want ErrTargetNotEmpty", err)
	}
	var n int
	if err := dst.r.QueryRow(`SELECT COUNT(*) FROM accounts`).Scan(&n); err != nil || n != 0 {
		t.Errorf("accounts in the target after the refusal: %d (%v); want none", n, err)
	}
}

// The row counts of both sides are compared before the copy commits: a
// target that takes rows without keeping them (here a trigger that drops
// every audit row, as an operator's or an extension's trigger could)
// fails the copy, naming the table and both counts, and leaves the
// target as empty as it was.
func TestMigrateStoreFailsAndWritesNothingWhenATablesCountsDiffer(t *testing.T) {
	ctx := context.Background()
	src := filledSQLite(t)
	dsn := pgtest.DSN(t)
	dst, err := OpenPostgres(ctx, dsn, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for _, stmt := range []string{
		`CREATE FUNCTION drop_the_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`,
		`CREATE TRIGGER drop_audit_rows BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION drop_the_row()`,
	} {
		if _, err := dst.r.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	var audited int64
	if err := src.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_events`).Scan(&audited); err != nil || audited == 0 {
		t.Fatalf("the source holds %d audit rows (%v); the test needs some", audited, err)
	}

	_, err = CopyStore(ctx, src, dst)
	if want := fmt.Sprintf("table audit_events: %d rows in the source, 0 in the target", audited); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("copy into a target that drops audit rows: %v; want it failed with %q", err, want)
	}
	for _, table := range []string{"accounts", "orders", "certificates", "jobs"} {
		var n int
		if err := dst.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s in the target after the failed copy: %d (%v); want none", table, n, err)
		}
	}
}

func TestMigrateStoreGoesOnlyFromSQLiteToPostgreSQL(t *testing.T) {
	ctx := context.Background()
	a, b := filledSQLite(t), filledSQLite(t)
	if _, err := CopyStore(ctx, a, b); err == nil {
		t.Error("copied from SQLite to SQLite")
	}
}

func TestMigrateStoreCopiesTablesOfMoreRowsThanOneStatementWrites(t *testing.T) {
	ctx := context.Background()
	src, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "src.db"), SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	seeds, orders := seedMany(t, src, 2345) // challenges: 9,381 rows, ten statements
	dst, _ := copyToPostgres(t, src)
	for _, i := range []int{0, 999, 1000, 2344} {
		o, err := dst.GetOrder(ctx, "p", orders[i].ID)
		if err != nil {
			t.Fatalf("order %d in the target: %v", i, err)
		}
		a, err := dst.GetAuthz(ctx, "p", o.AuthzIDs[len(o.AuthzIDs)-1])
		if err != nil || len(a.Challenges) != 3 || a.Identifier != seeds[i].Identifiers[len(seeds[i].Identifiers)-1] {
			t.Errorf("order %d's last authorization in the target: %+v (%v)", i, a, err)
		}
		cs, err := dst.CertificatesBySerial(ctx, "p", seeds[i].Certificate.Serial)
		if err != nil || len(cs) != 1 || cs[0].OrderID != o.ID || cs[0].PublicKey[0] != byte(i) {
			t.Errorf("order %d's certificate in the target: %+v (%v); want it alone", i, cs, err)
		}
	}
}

// An instance left writing to the source (which the operator should have
// stopped) cannot make a copy see an order without its account: every
// table is read in one snapshot. A writer adds an account and its order,
// child after parent, while copies run; each copy must commit, with no
// order whose account it lacks.
func TestMigrateStoreReadsTheSourceInOneSnapshot(t *testing.T) {
	ctx := context.Background()
	src, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "src.db"), SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	seedMany(t, src, 100) // so that a copy takes long enough to interleave
	stop := make(chan struct{})
	written := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				written <- nil
				return
			default:
			}
			a, _, err := src.CreateAccount(ctx, Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, t0)
			if err == nil {
				id := acme.Identifier{Type: "dns", Value: "w.example.com"}
				_, err = src.CreateOrder(ctx, Order{Profile: "p", AccountID: a.ID, Identifiers: []acme.Identifier{id}, Expires: t0.Add(24 * time.Hour)},
					[]Authz{{Identifier: id, Expires: t0.Add(24 * time.Hour), Challenges: []Challenge{{Type: "http-01", Token: NewID()}}}}, t0)
			}
			if err != nil {
				written <- err
				return
			}
		}
	}()
	for range 5 {
		dst, err := OpenPostgres(ctx, pgtest.DSN(t), PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = CopyStore(ctx, src, dst)
		dst.Close()
		if err != nil {
			close(stop)
			<-written
			t.Fatalf("a copy while the source is written: %v", err)
		}
	}
	close(stop)
	if err := <-written; err != nil {
		t.Fatalf("the writer: %v", err)
	}
}

// An id the source gave once is never given again in the target, though
// its row was deleted before the move: SQLite's AUTOINCREMENT never
// reuses one, and neither may the target's sequence. A revocation given
// the id of a pruned ledger row at or below the CRL's ledger_seq would
// look already listed: StaleCRLIssuers would miss it, and a CRL
// regeneration lost to a crash after it would never be queued.
func TestMigrateStoreGivesNoIdTheSourceGaveBeforeItsRowWasDeleted(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		// fill writes rows and deletes the one of the highest id, and
		// returns that id.
		fill func(t *testing.T, src *DB) int64
		// next writes a new row in the target and returns its id.
		next func(t *testing.T, dst *DB) int64
	}{
		{
			name: "revocations: the last ledger row pruned with its expired certificate",
			fill: func(t *testing.T, src *DB) int64 {
				kept := issuedCert(t, src, "0a", t0.Add(100*24*time.Hour))
				expired := issuedCert(t, src, "0b", t0.Add(time.Hour))
				if _, err := revoke(t, src, kept, "ca", 1); err != nil {
					t.Fatal(err)
				}
				// Superseded: a certificate revoked for keyCompromise is
				// never pruned.
				last, err := revoke(t, src, expired, "ca", 4)
				if err != nil {
					t.Fatal(err)
				}
				publishDER(t, src, func(n int64) []byte { return []byte{byte(n)} })
				if p, err := src.PruneRetention(ctx, Retention{Now: t0.Add(48 * time.Hour), CertificatesBefore: t0.Add(24 * time.Hour)}); err != nil || p.Revocations != 1 {
					t.Fatalf("pruning the expired certificate: %+v %v", p, err)
				}
				return last.ID
			},
			next: func(t *testing.T, dst *DB) int64 {
				r, err := revoke(t, dst, issuedCert(t, dst, "0c", t0.Add(100*24*time.Hour)), "ca", 1)
				if err != nil {
					t.Fatal(err)
				}
				if stale, err := dst.StaleCRLIssuers(ctx); err != nil || !slices.Equal(stale, []string{"ca"}) {
					t.Errorf("issuers whose CRL lacks a revocation, after one in the target: %v (%v); want ca", stale, err)
				}
				return r.ID
			},
		},
		{
			name: "jobs: the last job settled and pruned",
			fill: func(t *testing.T, src *DB) int64 {
				var last int64
				for _, k := range []string{"a", "b"} {
					j, _, err := src.EnqueueJob(ctx, NewJob{Kind: "k", Key: k, RunAt: t0, MaxAttempts: 1}, t0)
					if err != nil {
						t.Fatal(err)
					}
					last = j.ID
				}
				if _, err := src.ClaimJobs(ctx, "k", "w", t0, t0.Add(time.Minute), 2); err != nil {
					t.Fatal(err)
				}
				if _, err := src.CompleteJob(ctx, last, "w", t0); err != nil {
					t.Fatal(err)
				}
				if n, err := src.PruneJobs(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
					t.Fatalf("pruning the settled job: %d %v", n, err)
				}
				return last
			},
			next: func(t *testing.T, dst *DB) int64 {
				j, _, err := dst.EnqueueJob(ctx, NewJob{Kind: "k", Key: "new", RunAt: t0, MaxAttempts: 1}, t0)
				if err != nil {
					t.Fatal(err)
				}
				return j.ID
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "src.db"), SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			given := c.fill(t, src)
			dst, _ := copyToPostgres(t, src)
			if id := c.next(t, dst); id <= given {
				t.Errorf("the first new row in the target got id %d; the source had given ids up to %d", id, given)
			}
		})
	}
}

// SQLite keeps any bytes in a TEXT column; PostgreSQL refuses bytes that
// are not UTF-8, and NUL, and a single such value failed the whole copy
// (a client's User-Agent in Latin-1, a script's stderr in a job's error,
// as older binaries stored them). Such text is copied with U+FFFD in
// place of each run of what PostgreSQL cannot hold; the rest as it is.
func TestMigrateStoreCopiesTextPostgreSQLCannotHoldWithReplacementCharacters(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, table, column, stored, want string
	}{
		{"a User-Agent in Latin-1 in the audit trail", "audit_events", "user_agent", "curl f\xfcr Windows", "curl f\uFFFDr Windows"},
		{"a script's stderr, not UTF-8, as a job's error", "jobs", "last_error", "exited with status 1: \xff\xfe", "exited with status 1: \uFFFD"},
		{"a NUL in an order's failure detail", "orders", "failure_detail", "refused\x00here", "refused\uFFFDhere"},
		{"text that is UTF-8 already", "orders", "failure_detail", "refusé ✓", "refusé ✓"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "src.db"), SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			// One row of each table, its column then rewritten as an
			// older binary stored it.
			auditAt(t, src, t0)
			if _, _, err := src.EnqueueJob(ctx, NewJob{Kind: "k", Key: "a", RunAt: t0, MaxAttempts: 1}, t0); err != nil {
				t.Fatal(err)
			}
			processingOrder(t, src)
			if c.table == "audit_events" {
				// Insert-only: the row is written with the text.
				_, err = rawW(src).Exec(`INSERT INTO audit_events (at, event, outcome, `+c.column+`) VALUES (?, 'x', 'success', ?)`, t0.UnixMilli(), c.stored)
			} else {
				_, err = rawW(src).Exec(`UPDATE `+c.table+` SET `+c.column+` = ?`, c.stored)
			}
			if err != nil {
				t.Fatal(err)
			}
			dst, _ := copyToPostgres(t, src)
			var got []string
			rows, err := dst.r.QueryContext(ctx, `SELECT `+c.column+` FROM `+c.table+` WHERE `+c.column+` <> ''`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				got = append(got, s)
			}
			if !slices.Equal(got, []string{c.want}) {
				t.Errorf("%s.%s in the target: %q; want %q", c.table, c.column, got, c.want)
			}
		})
	}
}

// The tables and columns added last are copied as the older ones: a relay
// order's upstream placement (without it, an instance of the fleet would
// place a second upstream order for an order prepared before the move)
// and a certificate's alternate chains (cert/{id}/{n}).
func TestMigrateStoreCopiesARelayPlacementAndACertificatesAlternateChains(t *testing.T) {
	ctx := context.Background()
	src := filledSQLite(t)
	issued, err := issueWithAlternates(t, src, []string{"first alternate", "second alternate"}, false)
	if err != nil {
		t.Fatal(err)
	}
	placed := processingOrder(t, src)
	if _, ok, err := src.ClaimRelayPlacement(ctx, placed.ID, "host:1:a", t0, t0.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := src.RecordRelayPlacement(ctx, placed.ID, "host:1:a", "https://up.example/order/1", t0); err != nil {
		t.Fatal(err)
	}
	claimed := processingOrder(t, src)
	if _, ok, err := src.ClaimRelayPlacement(ctx, claimed.ID, "host:1:a", t0, t0.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}

	dst, _ := copyToPostgres(t, src)
	c, err := dst.GetCertificate(ctx, "p", issued.ID)
	if err != nil || !slices.Equal(c.AlternatesPEM, issued.AlternatesPEM) {
		t.Errorf("the certificate in the target: alternates %q (%v); want %q", c.AlternatesPEM, err, issued.AlternatesPEM)
	}
	for _, want := range []RelayPlacement{
		{OrderID: placed.ID, Owner: "host:1:a", Until: t0.Add(time.Minute), UpstreamOrderURL: "https://up.example/order/1"},
		{OrderID: claimed.ID, Owner: "host:1:a", Until: t0.Add(time.Minute)},
	} {
		p, err := dst.GetRelayPlacement(ctx, want.OrderID)
		if err != nil || p.Owner != want.Owner || !p.Until.Equal(want.Until) || p.UpstreamOrderURL != want.UpstreamOrderURL {
			t.Errorf("the placement in the target: %+v (%v); want %+v", p, err, want)
		}
	}
}

// Every column of every row reaches the target as the source holds it,
// compared value by value (bytes as bytes, text as its bytes, NULL as
// NULL), not only counted: a row copied with a column lost to its
// default, an empty BLOB turned NULL, or bytes turned text would pass a
// count. The source holds a row in every table but audit_prune_cutoff
// (a prune's cutoff, written and deleted in the prune's transaction), so
// that a table a later migration adds fails here until it is filled.
func TestMigrateStoreCopiesEveryColumnOfEveryRowAsTheSourceHoldsIt(t *testing.T) {
	ctx := context.Background()
	src := filledSQLite(t)
	if _, err := issueWithAlternates(t, src, []string{"alternate"}, false); err != nil {
		t.Fatal(err)
	}
	placed := processingOrder(t, src)
	if _, ok, err := src.ClaimRelayPlacement(ctx, placed.ID, "host:1:a", t0, t0.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if err := src.CreateEABKey(ctx, EABKey{KID: "kid-1", Profile: "p", Label: "fleet", HMACKey: []byte{1, 2, 3}, Created: t0}); err != nil {
		t.Fatal(err)
	}
	if err := src.PublishSigner(ctx, SignerPublication{Profile: "p", Signer: "local_ca", Revocation: RevocationLedger, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := src.PutRelayHTTPToken(ctx, RelayHTTPToken{Token: "tok", Identifier: "a.example.com", KeyAuth: "tok.thumb", Expires: t0.Add(time.Hour)}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.SpendLimits(ctx, []LimitSpend{{Key: "new_orders/p/acct", Emission: time.Minute, Burst: 10, Cost: 1}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := src.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	owed, _, err := src.EnqueueJob(ctx, NewJob{Kind: "relay_issue", Key: "o", Lane: "signer:p", Payload: []byte(`{"order":"o"}`),
		RunAt: t0, Deadline: t0.Add(time.Hour), MaxAttempts: 8}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.CancelJob(ctx, owed.ID, t0); err != nil {
		t.Fatal(err)
	}
	// The columns of the newest steps, which nothing above sets.
	if _, err := rawW(src).Exec(`UPDATE orders SET certificate_profile = 'short', replaces = 'aki.serial',
		replaces_certificate_id = certificate_id WHERE certificate_id IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := rawW(src).Exec(`UPDATE jobs SET rerun_at = ? WHERE key = 'a'`, t0.Add(time.Minute).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	// A prune under way (or whose process ended): its row is the trail's
	// to write on the target.
	if _, err := rawW(src).Exec(`INSERT INTO prune_progress (id, updated_at, audit_row) VALUES ('prune-1', ?, '{"Event":"audit_pruned"}')`,
		t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}

	dst, _ := copyToPostgres(t, src)
	tables, err := sqliteTablesParentsFirst(ctx, src.r)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		want, got := rowsAsText(t, src.r, table), rowsAsText(t, dst.r, table)
		if len(want) == 0 && table.name != "audit_prune_cutoff" {
			t.Errorf("table %s: the source holds no row; fill it, so that its copy is checked", table.name)
		}
		if missing, extra := without(want, got), without(got, want); len(missing)+len(extra) > 0 {
			t.Errorf("table %s: rows of the source not in the target:\n%s\nrows of the target not in the source:\n%s",
				table.name, strings.Join(missing, "\n"), strings.Join(extra, "\n"))
		}
	}
}

// without is the lines of a that b lacks.
func without(a, b []string) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, l)
		}
	}
	return out
}

// rowsAsText reads every row of table through q, each as one line of its
// columns — bytes in hex, text quoted, NULL as NULL,
// numbers in decimal — sorted, so that two databases' rows compare
// whatever order they come in.
func rowsAsText(t *testing.T, q stringQuerier, table copyTableInfo) []string {
	t.Helper()
	quoted := make([]string, len(table.columns))
	for i, c := range table.columns {
		quoted[i] = `"` + c + `"`
	}
	rows, err := q.QueryContext(context.Background(), `SELECT `+strings.Join(quoted, ", ")+` FROM `+table.name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	vals := make([]any, len(table.columns))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var out []string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var line strings.Builder
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				fmt.Fprintf(&line, "%s=NULL ", table.columns[i])
			case []byte:
				fmt.Fprintf(&line, "%s=bytes:%x ", table.columns[i], v)
			case string:
				fmt.Fprintf(&line, "%s=text:%q ", table.columns[i], v)
			default:
				fmt.Fprintf(&line, "%s=%v ", table.columns[i], v)
			}
		}
		out = append(out, line.String())
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
