package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/acmeproxy/authority"
	"github.com/acmeproxy/caddy-acme-proxy/clock/clocktest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/signer/localca"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// smallTables hold a row per server, per CA or per profile, never per
// request: reading all of one is no cost that grows with the database.
var smallTables = []string{"secrets", "crls", "crl_numbers", "crl_name_numbers", "signer_publications",
	"flushes", "audit_prune_cutoff", "schema_migrations"}

// partialIndexes hold only rows in a passing state, few whatever the
// history: a search of one by a class's columns reads those alone.
var partialIndexes = []string{
	"jobs_abandon_owed", // the cancelled jobs whose Abandon has not run yet
}

// everyRowOf is the plan step's table when the step reads every row of a
// table that grows with the orders served, or with their history: a
// SCAN of it, or a SEARCH constrained only by columns that a whole class
// of rows shares (a job's kind or lane, a row's profile, a CRL's issuer),
// which reads every finished job or order of that class. A status
// narrows: the path asks for rows in a live state (a ready or running
// job), which are few whatever the history. subqueries are the names
// the plan gives its own intermediate results (CO-ROUTINE due).
func everyRowOf(step string, subqueries []string) (string, bool) {
	f := strings.Fields(step)
	if len(f) < 2 || (f[0] != "SCAN" && f[0] != "SEARCH") {
		return "", false
	}
	table := f[1]
	if slices.Contains(smallTables, table) || slices.Contains(subqueries, table) || table == "CONSTANT" ||
		strings.Contains(step, "VALUES CLAUSE") || strings.Contains(step, "VIRTUAL TABLE") {
		return "", false
	}
	if i := slices.Index(f, "INDEX"); i >= 0 && i+1 < len(f) && slices.Contains(partialIndexes, f[i+1]) {
		return "", false
	}
	if f[0] == "SCAN" {
		return table, true
	}
	open, end := strings.LastIndex(step, "("), strings.LastIndex(step, ")")
	if open < 0 || end < open {
		return "", false
	}
	for _, term := range strings.Split(step[open+1:end], " AND ") {
		switch term {
		case "kind=?", "profile=?", "issuer_key_id=?", "lane=?":
		default:
			return "", false // a term that narrows to a few rows
		}
	}
	return table, true
}

// TestEveryStatementOnTheIssuancePathReadsAFewRowsByIndex runs one
// issuance through the authority, the local CA and the store — new
// account, nonce spends, new-order with its rate limits, the
// authorization, the challenge, finalize, the certificate's download, the
// audit rows they write — and a job enqueued, polled for, claimed and
// completed as a runner does, recording every statement the store's
// connections run, and asks SQLite for each one's plan. With a million
// orders a statement that scans a growing table, or reads every row of a
// kind, profile or status, or sorts, costs time on every certificate; a
// statement on this path must look its rows up by an index and read them
// in the index's order. SQLite has no statistics here, so the plan it
// shows for this small database is the one it uses at any size.
func TestEveryStatementOnTheIssuancePathReadsAFewRowsByIndex(t *testing.T) {
	ctx := context.Background()
	db, ran := openRecording(t)
	start := time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)
	clk := clocktest.New(start)
	sgn, err := localca.New(steadyCA(t, start), localca.Options{Clock: clk, Lifetime: 7 * day})
	if err != nil {
		t.Fatal(err)
	}
	limits := authority.Limits{
		AccountsPerIP: authority.Rate{Count: 100, Period: time.Hour}, OrdersPerAccount: authority.Rate{Count: 100, Period: time.Hour},
		PendingAuthorizations: authority.Rate{Count: 100}, FailedValidations: authority.Rate{Count: 100, Period: time.Hour},
		DuplicateCertificates: authority.Rate{Count: 100, Period: time.Hour}, MaxIdentifiers: authority.Rate{Count: 100}}
	au, err := authority.New(authority.Config{Profile: "p", Challenges: []string{acme.ChallengeHTTP01, acme.ChallengeDNS01}, Limits: limits},
		authority.Options{DB: db, Queue: jobs.NewQueue(db, clk), Signer: sgn, Validator: failNames{}, Clock: clk,
			LookupAddr: func(context.Context, string) ([]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	cl := authority.Client{IP: "192.0.2.1"}
	nonce := 0
	spend := func(acct store.Account) {
		t.Helper()
		nonce++
		if _, fresh, err := db.UseNonceAs(ctx, fmt.Sprintf("nonce-%d", nonce), clk.Now().Add(time.Hour), "p", acct.ID); err != nil || !fresh {
			t.Fatalf("nonce: %v, %v", fresh, err)
		}
	}

	// new-account, as the HTTP front runs it: the key looked up, then
	// the account created under the accounts_per_ip limit.
	if _, err := db.AccountByKey(ctx, "p", "key-1"); err == nil {
		t.Fatal("an account before new-account")
	}
	acct, _, err := au.CreateAccount(ctx, store.Account{Thumbprint: "key-1", KeyJWK: []byte(`{}`)}, cl)
	if err != nil {
		t.Fatal(err)
	}
	// new-order, with its limits.
	spend(acct)
	names := []acme.Identifier{{Type: acme.IdentifierDNS, Value: "a.example.com"}, {Type: acme.IdentifierDNS, Value: "b.example.com"}}
	lim, err := au.OrderLimits(ctx, acct, names, []bool{false, false}, false, cl)
	if err != nil {
		t.Fatal(err)
	}
	o, err := au.CreateOrder(ctx, acct.ID, names, []bool{false, false}, time.Time{}, time.Time{}, "", nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	// Each authorization read, its challenge answered and validated.
	for _, aid := range o.AuthzIDs {
		spend(acct)
		a, err := au.OwnAuthz(ctx, acct.ID, aid)
		if err != nil {
			t.Fatal(err)
		}
		spend(acct)
		if _, _, err := au.OwnChallenge(ctx, acct.ID, a.Challenges[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := au.AnswerChallenge(ctx, a.Challenges[0], a, acct.Thumbprint, authority.Client{}); err != nil {
			t.Fatal(err)
		}
	}
	// The order polled, finalized, the certificate downloaded.
	spend(acct)
	if o, err = au.OwnOrder(ctx, acct.ID, o.ID); err != nil || o.Status != acme.StatusReady {
		t.Fatalf("the order after its validations: %s, %v", o.Status, err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"a.example.com", "b.example.com"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	spend(acct)
	if o, err = au.Finalize(ctx, acct, o.ID, func() ([]byte, error) { return csr, nil }, cl); err != nil || o.Status != acme.StatusValid {
		t.Fatalf("finalize: %s, %v", o.Status, err)
	}
	spend(acct)
	if _, err := au.OwnCertificate(ctx, acct.ID, o.CertificateID); err != nil {
		t.Fatal(err)
	}
	// A job, as a validation that does not settle inline, or a relayed
	// order, hands its work to one: stored, found due, claimed, settled.
	now := clk.Now()
	if _, _, err := db.EnqueueJob(ctx, store.NewJob{Kind: "k", Key: "j1", MaxAttempts: 3, RunAt: now}, now); err != nil {
		t.Fatal(err)
	}
	lanes := []string{"", "p"}
	if due, err := db.AnyJobDue(ctx, "k", lanes, "me", now); err != nil || !due {
		t.Fatalf("a due job: %v, %v", due, err)
	}
	if _, _, err := db.NextJobDue(ctx, []string{"k"}, lanes); err != nil {
		t.Fatal(err)
	}
	claimed, err := db.ClaimJobsIn(ctx, "k", lanes, "me", now, now.Add(time.Minute), 4)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d jobs, %v", len(claimed), err)
	}
	if _, err := db.ExtendJobLeases(ctx, "k", "me", now.Add(2*time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CompleteJob(ctx, claimed[0].ID, "me", now); err != nil {
		t.Fatal(err)
	}

	stmts := ran()
	explained := 0
	for _, stmt := range stmts {
		if store.IsMigrationStatement(stmt) {
			continue
		}
		plan, ok, err := store.QueryPlan(ctx, db, stmt)
		if err != nil {
			t.Fatalf("EXPLAIN QUERY PLAN %s: %v", stmt, err)
		}
		if !ok {
			continue // not a query: BEGIN, SAVEPOINT, a pragma
		}
		explained++
		var subqueries []string
		for _, step := range plan {
			if f := strings.Fields(step); len(f) == 2 && (f[0] == "CO-ROUTINE" || f[0] == "MATERIALIZE") {
				subqueries = append(subqueries, f[1])
			}
		}
		for _, step := range plan {
			table, all := everyRowOf(step, subqueries)
			switch {
			case all:
				t.Errorf("reads every row of %s (%s):\n%s\nplan: %s", table, step, oneLine(stmt), strings.Join(plan, "; "))
			case strings.Contains(step, "TEMP B-TREE") && strings.HasPrefix(oneLine(stmt), claimPrefix):
				// The claim takes the owed Abandons of its kind,
				// then the oldest of its due jobs, ready or with a
				// lapsed lease: ranges of the indexes, merged by a
				// sort of the live jobs it read — the backlog, never
				// the history.
			case strings.Contains(step, "TEMP B-TREE"):
				t.Errorf("sorts what it reads (%s):\n%s\nplan: %s", step, oneLine(stmt), strings.Join(plan, "; "))
			}
		}
	}
	// The path above runs a few dozen statements; far fewer means the
	// observer missed them.
	if explained < 25 {
		t.Errorf("explained %d statements of the issuance path; want every one it ran (at least 25): %q", explained, stmts)
	}
}

// claimPrefix begins the statement of ClaimJobsIn.
const claimPrefix = "UPDATE jobs SET status = CASE WHEN status = 'cancelled' THEN status ELSE 'running' END"

// openRecording opens a SQLite store that records every distinct
// statement its connections run; ran returns them in the order first run.
func openRecording(t *testing.T) (db *store.DB, ran func() []string) {
	var (
		mu   sync.Mutex
		seen []string
	)
	db = store.OpenSQLiteObserved(t, func(q string) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(seen, q) {
			seen = append(seen, q)
		}
	})
	return db, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
