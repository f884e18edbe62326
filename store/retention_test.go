package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
)

const day = 24 * time.Hour

// life describes one order for the retention tests: created at at, it
// and its authorizations expire after a day (authzLife, when set, for the
// authorizations), and it is brought to state; a valid order's
// certificate expires at notAfter.
type life struct {
	at        time.Time
	authzLife time.Duration
	idents    int
	state     string // pending, ready, processing, invalid, valid, revoked; relayed, abandoned (processing, invalid, with a relay mapping)
	notAfter  time.Time
	// prepared: the relay placed an upstream order for it at new-order
	// (prepare_upstream on), recorded in relay_placements.
	prepared bool
}

// lived is what makeOrder stored.
type lived struct {
	order Order
	cert  Certificate
}

// makeOrder stores an order of account acct as l says, through the
// store's own steps.
func makeOrder(t testing.TB, db *DB, acct string, l life) lived {
	t.Helper()
	ctx := context.Background()
	if l.idents == 0 {
		l.idents = 1
	}
	if l.authzLife == 0 {
		l.authzLife = day
	}
	var (
		authzs []Authz
		idents []acme.Identifier
	)
	for i := range l.idents {
		id := acme.Identifier{Type: "dns", Value: fmt.Sprintf("h%d.example.com", i)}
		idents = append(idents, id)
		authzs = append(authzs, Authz{Identifier: id, Expires: l.at.Add(l.authzLife),
			Challenges: []Challenge{{Type: "http-01", Token: NewID()}, {Type: "dns-01", Token: NewID()}}})
	}
	o, err := db.CreateOrder(ctx, Order{Profile: "p", AccountID: acct, Identifiers: idents, Expires: l.at.Add(day)}, authzs, l.at)
	if err != nil {
		t.Fatal(err)
	}
	out := lived{order: o}
	if l.prepared {
		if _, won, err := db.ClaimRelayPlacement(ctx, o.ID, "instance", l.at, l.at.Add(time.Minute)); err != nil || !won {
			t.Fatalf("claiming the upstream order of %s: %v %v", o.ID, won, err)
		}
		if _, err := db.RecordRelayPlacement(ctx, o.ID, "instance", "https://ca.example/order/"+o.ID, l.at); err != nil {
			t.Fatal(err)
		}
	}
	if l.state == "pending" {
		return out
	}
	for i, aid := range o.AuthzIDs {
		a, err := db.GetAuthz(ctx, "p", aid)
		if err != nil {
			t.Fatal(err)
		}
		c := a.Challenges[0]
		ok := l.state != "invalid"
		if _, err := db.CompleteChallenge(ctx, c.ID, ok, nil, l.at); err != nil {
			t.Fatal(err)
		}
		if !ok || i == len(o.AuthzIDs)-1 {
			break
		}
	}
	if l.state == "ready" || l.state == "invalid" {
		return out
	}
	if ok, err := db.ClaimOrderForIssue(ctx, o.ID, []byte{1}, OrderClient{}, "", l.at); err != nil || !ok {
		t.Fatalf("claiming order %s: %v %v", o.ID, ok, err)
	}
	if l.state == "relayed" || l.state == "abandoned" {
		if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}}, l.at); err != nil {
			t.Fatal(err)
		}
	}
	if l.state == "abandoned" {
		if err := db.SettleRelayOrder(ctx, o.ID, RelayInvalid, "upstream refused", l.at); err != nil {
			t.Fatal(err)
		}
		if err := db.FailOrder(ctx, o.ID, nil, "upstream refused", l.at); err != nil {
			t.Fatal(err)
		}
	}
	if l.state == "processing" || l.state == "relayed" || l.state == "abandoned" {
		return out
	}
	serial := fmt.Sprintf("%x", l.at.UnixNano()) + NewID()[20:]
	out.cert, err = db.IssueOrder(ctx, Certificate{OrderID: o.ID, Profile: "p", AccountID: acct, Serial: serial,
		ChainPEM: "-", PublicKey: []byte{1}, NotBefore: l.at, NotAfter: l.notAfter},
		AuditEvent{At: l.at, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID, Serial: serial}, l.at)
	if err != nil {
		t.Fatal(err)
	}
	if l.state == "revoked" {
		reason := 4
		if _, err := db.RevokeCertificate(ctx, Revocation{CertificateID: out.cert.ID, Profile: "p", OrderID: o.ID, Serial: serial,
			IssuerKeyID: "ca", Reason: &reason, RevokedAt: l.at.Add(time.Hour), NotAfter: l.notAfter, ActorKind: "admin"},
			AuditEvent{At: l.at, Event: "certificate_revoked", Outcome: "success", OrderID: o.ID}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func newAccount(t testing.TB, db *DB, at time.Time) Account {
	t.Helper()
	a, _, err := db.CreateAccount(context.Background(), Account{Profile: "p", Thumbprint: NewID(), KeyJWK: []byte(`{}`)}, at)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rowCounts counts the rows of every table that grows with the orders
// served.
func rowCounts(t testing.TB, db *DB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"accounts", "orders", "order_identifiers", "authorizations", "challenges", "certificates", "revocations",
		"relay_orders", "relay_placements", "audit_events", "jobs", "crls", "used_nonces"} {
		var n int
		if err := db.r.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

// sweepAt is the default retention (30 days for orders, 90 for
// certificates) at now.
func sweepAt(now time.Time) Retention {
	return Retention{OrdersBefore: now.Add(-30 * day), CertificatesBefore: now.Add(-90 * day), Now: now}
}

func TestTheRetentionSweepPrunesOnlyWhatNothingNeedsAnyMore(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(400 * day)
		cases := []struct {
			name   string
			life   life
			pruned bool
		}{
			{"kept/a pending order not yet expired", life{at: now.Add(-time.Hour), state: "pending", prepared: true}, false},
			{"kept/a pending order expired 29 days ago", life{at: now.Add(-30 * day), state: "pending"}, false},
			{"pruned/a pending order expired 31 days ago", life{at: now.Add(-32 * day), state: "pending", idents: 3}, true},
			{"pruned/a ready order expired 31 days ago", life{at: now.Add(-32 * day), state: "ready", idents: 2, prepared: true}, true},
			{"pruned/an order that failed 40 days ago", life{at: now.Add(-40 * day), state: "invalid", idents: 2}, true},
			{"kept/an order that failed 10 days ago", life{at: now.Add(-10 * day), state: "invalid"}, false},
			{"kept/a failed order whose authorizations are still valid", life{at: now.Add(-40 * day), authzLife: 41 * day, state: "invalid"}, false},
			{"kept/an order processing for 100 days", life{at: now.Add(-100 * day), state: "processing"}, false},
			{"kept/an order relayed upstream for 100 days", life{at: now.Add(-100 * day), state: "relayed"}, false},
			{"pruned/a relayed order abandoned 40 days ago", life{at: now.Add(-40 * day), state: "abandoned"}, true},
			{"kept/a certificate not yet expired", life{at: now.Add(-5 * day), state: "valid", notAfter: now.Add(day)}, false},
			{"kept/a certificate expired 89 days ago", life{at: now.Add(-96 * day), state: "valid", notAfter: now.Add(-89 * day)}, false},
			{"kept/a revoked certificate expired 89 days ago", life{at: now.Add(-96 * day), state: "revoked", notAfter: now.Add(-89 * day)}, false},
			{"pruned/a certificate expired 91 days ago", life{at: now.Add(-98 * day), state: "valid", notAfter: now.Add(-91 * day), idents: 2}, true},
			{"pruned/a revoked certificate expired 91 days ago", life{at: now.Add(-98 * day), state: "revoked", notAfter: now.Add(-91 * day)}, true},
			{"kept/an expired certificate whose order's authorizations are still valid",
				life{at: now.Add(-98 * day), authzLife: 99 * day, state: "valid", notAfter: now.Add(-91 * day)}, false},
		}
		made := make([]lived, len(cases))
		for i, c := range cases {
			made[i] = makeOrder(t, db, newAccount(t, db, c.life.at).ID, c.life)
		}
		// Accounts: deactivated long enough ago with nothing left go.
		accounts := []struct {
			name   string
			at     time.Time // deactivated then; zero: still valid
			order  *life
			pruned bool
		}{
			{"pruned/deactivated 31 days ago with no order", now.Add(-31 * day), nil, true},
			{"pruned/deactivated 31 days ago with only prunable orders", now.Add(-31 * day), &life{at: now.Add(-40 * day), state: "invalid"}, true},
			{"kept/deactivated 31 days ago with a certificate left", now.Add(-31 * day), &life{at: now.Add(-40 * day), state: "valid", notAfter: now.Add(-33 * day)}, false},
			{"kept/deactivated 29 days ago with no order", now.Add(-29 * day), nil, false},
			{"kept/valid with no order", time.Time{}, nil, false},
		}
		accts := make([]Account, len(accounts))
		for i, a := range accounts {
			accts[i] = newAccount(t, db, now.Add(-500*day))
			if a.order != nil {
				makeOrder(t, db, accts[i].ID, *a.order)
			}
			if !a.at.IsZero() {
				if _, err := db.DeactivateAccount(ctx, accts[i].ID, a.at); err != nil {
					t.Fatal(err)
				}
			}
		}
		before := rowCounts(t, db)

		got, err := db.PruneRetention(ctx, sweepAt(now))
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cases {
			o := made[i].order
			_, err := db.GetOrder(ctx, "p", o.ID)
			if gone := errors.Is(err, ErrNotFound); gone != c.pruned || (err != nil && !gone) {
				t.Errorf("%s: reading the order after the sweep: %v; want pruned=%v", c.name, err, c.pruned)
			}
			for _, aid := range o.AuthzIDs {
				if _, err := db.GetAuthz(ctx, "p", aid); errors.Is(err, ErrNotFound) != c.pruned {
					t.Errorf("%s: its authorization: %v; want pruned=%v", c.name, err, c.pruned)
				}
			}
			var idents, chals int
			if err := db.r.QueryRow(db.q(`SELECT COUNT(*) FROM order_identifiers WHERE order_id = ?`), o.ID).Scan(&idents); err != nil {
				t.Fatal(err)
			}
			if err := db.r.QueryRow(db.q(`SELECT COUNT(*) FROM challenges c JOIN authorizations a ON a.id = c.authz_id WHERE a.order_id = ?`), o.ID).Scan(&chals); err != nil {
				t.Fatal(err)
			}
			if (idents == 0) != c.pruned || (chals == 0) != c.pruned {
				t.Errorf("%s: %d identifier rows and %d challenges left; want pruned=%v", c.name, idents, chals, c.pruned)
			}
			if made[i].cert.ID != "" {
				if _, err := db.CertificateOfOrder(ctx, o.ID); errors.Is(err, ErrNotFound) != c.pruned {
					t.Errorf("%s: its certificate: %v; want pruned=%v", c.name, err, c.pruned)
				}
			}
			if c.life.state == "relayed" || c.life.state == "abandoned" {
				if _, err := db.GetRelayOrder(ctx, o.ID); errors.Is(err, ErrNotFound) != c.pruned {
					t.Errorf("%s: its relay mapping: %v; want pruned=%v", c.name, err, c.pruned)
				}
			}
			if c.life.prepared {
				if _, err := db.GetRelayPlacement(ctx, o.ID); errors.Is(err, ErrNotFound) != c.pruned {
					t.Errorf("%s: its upstream order placement: %v; want pruned=%v", c.name, err, c.pruned)
				}
			}
			if c.life.state == "revoked" {
				if _, err := db.RevocationOf(ctx, made[i].cert.ID); errors.Is(err, ErrNotFound) != c.pruned {
					t.Errorf("%s: its revocation row: %v; want pruned=%v", c.name, err, c.pruned)
				}
			}
		}
		for i, a := range accounts {
			if _, err := db.GetAccount(ctx, "p", accts[i].ID); errors.Is(err, ErrNotFound) != a.pruned {
				t.Errorf("account %s: %v; want pruned=%v", a.name, err, a.pruned)
			}
		}
		after := rowCounts(t, db)
		// Orders of 3, 2, 2, 2, 1 and 1 identifiers (cases) and of 1 (an
		// account's), each authorization with two challenges; the two
		// deactivated accounts left empty.
		want := Pruned{Orders: 7, Authorizations: 12, Challenges: 24, Certificates: 2, Revocations: 1, Accounts: 2}
		for table, n := range map[string]int64{"orders": want.Orders, "authorizations": want.Authorizations, "challenges": want.Challenges,
			"order_identifiers": want.Authorizations, "certificates": want.Certificates, "revocations": want.Revocations, "relay_orders": 1,
			"relay_placements": 1} {
			if int64(before[table]-after[table]) != n {
				t.Errorf("%s: %d rows before, %d after; want %d pruned", table, before[table], after[table], n)
			}
		}
		if got.Orders != want.Orders || got.Authorizations != want.Authorizations || got.Challenges != want.Challenges ||
			got.Certificates != want.Certificates || got.Revocations != want.Revocations || got.Accounts != want.Accounts {
			t.Errorf("the sweep reports %+v; want %+v", got, want)
		}

		// A second sweep finds nothing left to do.
		again, err := db.PruneRetention(ctx, sweepAt(now))
		if err != nil || again.Any() {
			t.Errorf("a second sweep: %+v, %v; want nothing pruned", again, err)
		}
	})
}

func TestTwoInstancesSweepingAtOnceDeleteEachRowOnceAndBothSucceed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		now := t0.Add(400 * day)
		acct := newAccount(t, dbs[0], t0).ID
		const failed, expired, kept = 30, 20, 5
		for i := range failed {
			makeOrder(t, dbs[i%2], acct, life{at: now.Add(-40*day - time.Duration(i)*time.Minute), state: "invalid", idents: 2})
		}
		for i := range expired {
			makeOrder(t, dbs[i%2], acct, life{at: now.Add(-100 * day), state: "revoked", notAfter: now.Add(-91*day - time.Duration(i)*time.Minute)})
		}
		for range kept {
			makeOrder(t, dbs[0], acct, life{at: now.Add(-time.Hour), state: "valid", notAfter: now.Add(day)})
		}
		r := sweepAt(now)
		r.BatchOrders = 3
		var (
			got  [2]Pruned
			errs [2]error
			wg   sync.WaitGroup
		)
		start := make(chan struct{})
		for i, db := range dbs {
			wg.Go(func() {
				<-start
				got[i], errs[i] = db.PruneRetention(ctx, r)
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("concurrent sweeps: %v, %v; want both to succeed", errs[0], errs[1])
		}
		sum := got[0]
		sum.add(got[1])
		if sum.Orders != failed+expired || sum.Certificates != expired || sum.Revocations != expired ||
			sum.Authorizations != 2*failed+expired || sum.Challenges != 2*(2*failed+expired) {
			t.Errorf("the two sweeps deleted %+v and %+v between them; want each of %d orders once", got[0], got[1], failed+expired)
		}
		left := rowCounts(t, dbs[0])
		if left["orders"] != kept || left["certificates"] != kept || left["revocations"] != 0 || left["authorizations"] != kept {
			t.Errorf("rows left %v; want the %d live orders only", left, kept)
		}
		t.Logf("sweeps at once: %+v and %+v", got[0], got[1])
	})
}

func TestTheSweepTakesOrdersInBatchesBoundedByTheirAuthorizations(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(400 * day)
		acct := newAccount(t, db, t0).ID
		for range 7 {
			makeOrder(t, db, acct, life{at: now.Add(-40 * day), state: "invalid", idents: 10})
		}
		big := makeOrder(t, db, acct, life{at: now.Add(-41 * day), state: "pending", idents: 30})
		r := sweepAt(now)
		r.BatchAuthorizations = 25
		got, err := db.PruneRetention(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		// Certificates: one (empty) batch. Orders: the 30-identifier order
		// alone (a batch takes at least one), then 2+2+2+1 of 10. Accounts:
		// one.
		if got.Orders != 8 || got.Authorizations != 100 || got.Batches != 1+5+1 {
			t.Errorf("pruned %+v; want 8 orders, 100 authorizations in 7 batches", got)
		}
		if _, err := db.GetOrder(ctx, "p", big.order.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("an order larger than a batch: %v; want pruned on its own", err)
		}
		if got.LongestBatch <= 0 {
			t.Errorf("longest batch %s; want it measured", got.LongestBatch)
		}
	})
}

func TestASweepStopsBetweenBatchesWhenItsContextEnds(t *testing.T) {
	db := openTest(t)
	now := t0.Add(400 * day)
	acct := newAccount(t, db, t0).ID
	for range 3 {
		makeOrder(t, db, acct, life{at: now.Add(-40 * day), state: "invalid"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := db.PruneRetention(ctx, sweepAt(now))
	if !errors.Is(err, context.Canceled) || got.Any() {
		t.Errorf("a cancelled sweep: %+v, %v; want nothing pruned and context.Canceled", got, err)
	}
	if n := rowCounts(t, db)["orders"]; n != 3 {
		t.Errorf("%d orders left; want 3", n)
	}
}

func TestPruningExpiredRevocationsKeepsTheCRLCorrect(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(400 * day)
		acct := newAccount(t, db, t0).ID
		// The live revocation is recorded first, so that the pruned one
		// holds the ledger's highest sequence number, which the CRL
		// records as the last it took into account.
		live := makeOrder(t, db, acct, life{at: now.Add(-2 * day), state: "revoked", notAfter: now.Add(5 * day)})
		old := makeOrder(t, db, acct, life{at: now.Add(-100 * day), state: "revoked", notAfter: now.Add(-91 * day)})
		var listed []string
		build := func(_ int64, entries []CRLEntry) ([]byte, time.Time, time.Time, error) {
			listed = listed[:0]
			for _, e := range entries {
				listed = append(listed, e.Serial)
			}
			return []byte{1}, now, now.Add(day), nil
		}
		first, err := db.PublishCRL(ctx, "ca", "CN=ca", now, build)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := db.PruneRetention(ctx, sweepAt(now)); err != nil || got.Revocations != 1 {
			t.Fatalf("sweep: %+v, %v; want the expired revocation pruned", got, err)
		}
		if _, err := db.RevocationOf(ctx, old.cert.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the expired revocation: %v; want pruned", err)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
			t.Errorf("after the prune, stale CRLs %v, %v; want none: nothing was revoked", stale, err)
		}
		// A revocation after the prune must not reuse the pruned row's
		// sequence number, or the CRL would count it as taken into account.
		fresh := makeOrder(t, db, acct, life{at: now.Add(-time.Hour), state: "revoked", notAfter: now.Add(5 * day)})
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 1 || stale[0] != "ca" {
			t.Errorf("after a new revocation, stale CRLs %v, %v; want [ca]", stale, err)
		}
		second, err := db.PublishCRL(ctx, "ca", "CN=ca", now, build)
		if err != nil {
			t.Fatal(err)
		}
		if second.Number <= first.Number || fmt.Sprint(listed) != fmt.Sprint([]string{live.cert.Serial, fresh.cert.Serial}) {
			t.Errorf("CRL %d lists %v; want a higher number than %d listing %s and %s", second.Number, listed, first.Number,
				live.cert.Serial, fresh.cert.Serial)
		}
	})
}

// A key revoked for keyCompromise is refused for good (Baseline
// Requirements §6.1.1.3), and the certificate row is what says so: the
// sweep keeps it, with its order, past certificate_retention, while it
// prunes a certificate revoked for another reason beside it.
func TestACertificateRevokedForKeyCompromiseOutlivesItsRetentionSoItsKeyStaysRefused(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(400 * day)
		acct := newAccount(t, db, t0).ID
		compromised := makeOrder(t, db, acct, life{at: now.Add(-98 * day), state: "valid", notAfter: now.Add(-91 * day)})
		reason := acme.ReasonKeyCompromise
		if _, err := db.RevokeCertificate(ctx, Revocation{CertificateID: compromised.cert.ID, Profile: "p", OrderID: compromised.order.ID,
			Serial: compromised.cert.Serial, IssuerKeyID: "ca", Reason: &reason, RevokedAt: now.Add(-95 * day), NotAfter: compromised.cert.NotAfter,
			ActorKind: "account"}, AuditEvent{At: now.Add(-95 * day), Event: "certificate_revoked", Outcome: "success"}); err != nil {
			t.Fatal(err)
		}
		superseded := makeOrder(t, db, acct, life{at: now.Add(-98 * day), state: "revoked", notAfter: now.Add(-91 * day)})
		if _, err := db.PruneRetention(ctx, sweepAt(now)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.CertificateOfOrder(ctx, compromised.order.ID); err != nil {
			t.Errorf("the certificate revoked for keyCompromise after the sweep: %v; want it kept", err)
		}
		if got, err := db.KeyRevokedForCompromise(ctx, compromised.cert.PublicKey); err != nil || !got {
			t.Errorf("KeyRevokedForCompromise(its key) after the sweep = %v, %v; want true", got, err)
		}
		if _, err := db.CertificateOfOrder(ctx, superseded.order.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("the certificate revoked as superseded after the sweep: %v; want it pruned", err)
		}
	})
}

// refuseWith makes the running test's database refuse what the
// statements of its dialect say (triggers, by dialect name).
func refuseWith(t *testing.T, db *DB, byDialect map[string][]string) {
	t.Helper()
	for _, s := range byDialect[dialectOf(t).name] {
		if _, err := rawW(db).ExecContext(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// recordSweep is a Retention.Record writing a row that says what the
// sweep deleted.
func recordSweep(p Pruned, stopped error) (AuditEvent, bool) {
	detail := fmt.Sprintf("%d orders, %d accounts", p.Orders, p.Accounts)
	if stopped != nil {
		detail += ", stopped by: " + stopped.Error()
	}
	return AuditEvent{At: t0, Event: acme.EventRetentionPruned, Outcome: "success", ActorKind: "system", Detail: detail}, p.Any()
}

// The last batch of a sweep and the row recording the sweep are one
// write: a row the database refuses leaves that batch undeleted, so
// no order is gone without a row saying the sweep deleted it. Written
// after the last batch, the row could be lost (the database gone, the
// process killed) with the batch's rows deleted.
func TestTheLastBatchOfARetentionSweepAndItsRowAreOneWrite(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(400 * day)
		// A sweep of certificates alone: its one batch is its last.
		makeOrder(t, db, newAccount(t, db, t0).ID, life{at: now.Add(-200 * day), state: "valid", notAfter: now.Add(-100 * day)})
		refuseWith(t, db, map[string][]string{
			"sqlite": {`CREATE TRIGGER refuse_sweep_row BEFORE INSERT ON audit_events WHEN NEW.event = 'retention_pruned'
				BEGIN SELECT RAISE(ABORT, 'sweep row refused'); END`},
			"postgres": {`CREATE FUNCTION refuse_sweep_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				IF NEW.event = 'retention_pruned' THEN RAISE EXCEPTION 'sweep row refused'; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER refuse_sweep_row BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_sweep_row()`},
		})
		plan := Retention{CertificatesBefore: now.Add(-90 * day), Now: now, Record: recordSweep}
		got, err := db.PruneRetention(ctx, plan)
		if err == nil || got.Any() {
			t.Errorf("a sweep whose row is refused: %+v, %v; want nothing deleted and the refusal", got, err)
		}
		if n := rowCounts(t, db)["certificates"]; n != 1 {
			t.Errorf("%d certificates left; want the certificate kept, as no row records its deletion", n)
		}
	})
}

// A sweep that stops part way — a batch failed, its context ended —
// has deleted the batches before: its row records those, as the row of
// a sweep that ran to the end records all it deleted.
func TestARetentionSweepStoppedPartWayRecordsWhatItDeleted(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		now := t0.Add(400 * day)
		makeOrder(t, db, newAccount(t, db, t0).ID, life{at: now.Add(-40 * day), state: "invalid"})
		empty := newAccount(t, db, t0)
		if _, err := db.DeactivateAccount(ctx, empty.ID, t0); err != nil {
			t.Fatal(err)
		}
		// The orders go first; the accounts' batch, last, fails.
		refuseWith(t, db, map[string][]string{
			"sqlite": {`CREATE TRIGGER keep_accounts BEFORE DELETE ON accounts BEGIN SELECT RAISE(ABORT, 'accounts are kept'); END`},
			"postgres": {`CREATE FUNCTION keep_accounts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				RAISE EXCEPTION 'accounts are kept'; END $$`,
				`CREATE TRIGGER keep_accounts BEFORE DELETE ON accounts FOR EACH ROW EXECUTE FUNCTION keep_accounts()`},
		})
		plan := sweepAt(now)
		plan.Record = recordSweep
		got, err := db.PruneRetention(ctx, plan)
		if err == nil || got.Orders != 1 || got.Accounts != 0 {
			t.Fatalf("a sweep whose accounts' batch fails: %+v, %v; want the order deleted and the failure", got, err)
		}
		rows, err := db.SearchAudit(ctx, AuditFilter{Event: acme.EventRetentionPruned})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || !strings.HasPrefix(rows[0].Detail, "1 orders, 0 accounts, stopped by: ") || !strings.Contains(rows[0].Detail, "accounts are kept") {
			t.Errorf("the sweep's rows: %+v; want one recording the order deleted and the failure it stopped at", rows)
		}
	})
}
