package store

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
)

// bucketTAT is the stored TAT of the bucket key; 0 for no row.
func bucketTAT(t *testing.T, db *DB, key string) int64 {
	t.Helper()
	var tat int64
	err := rawW(db).QueryRowContext(context.Background(), `SELECT tat_ns FROM rate_limits WHERE key = ?`, key).Scan(&tat)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return tat
}

// issueWith issues the processing order o at now with spends, as the
// authority records a signed certificate; jobs adds a notification job
// to its audit row (which makes it a transaction on PostgreSQL too).
func issueWith(db *DB, o Order, now time.Time, jobs bool, spends ...LimitSpend) (Certificate, error) {
	ev := AuditEvent{At: now, Event: "certificate_issued", Outcome: "success", Profile: "p", OrderID: o.ID}
	if jobs {
		ev.Jobs = []NewJob{{Kind: "notify_deliver", RunAt: now, MaxAttempts: 3}}
	}
	return db.IssueOrder(context.Background(), Certificate{OrderID: o.ID, Profile: "p", AccountID: o.AccountID, Serial: NewID()[20:],
		ChainPEM: "-", PublicKey: []byte{1}, NotBefore: now, NotAfter: now.Add(time.Hour)}, ev, now, spends...)
}

// eachIssuancePath runs body per dialect and per issuance path, as
// subtests: without jobs (on PostgreSQL the issuance's one statement) and
// with a notification job on its audit row (its transaction).
func eachIssuancePath(t *testing.T, body func(t *testing.T, jobs bool)) {
	eachDialect(t, func(t *testing.T) {
		for _, jobs := range []bool{false, true} {
			name := "without jobs"
			if jobs {
				name = "with notification jobs"
			}
			t.Run(name, func(t *testing.T) { body(t, jobs) })
		}
	})
}

// An issuance takes its spends (duplicate_certificates: a certificate
// counted when it is issued) in its own write, and a certificate is never
// refused by them: a spend that does not fit is dropped, the certificate
// stored, the bucket left as the check at the next new-order must find
// it. An issuance that finds its order issued already spends nothing.
// Both dialects, with and without notification jobs (PostgreSQL's one
// statement and its transaction).
func TestAnIssuanceSpendsItsLimitsInItsOwnWriteAndNeverRefusesTheCertificate(t *testing.T) {
	eachIssuancePath(t, func(t *testing.T, jobs bool) {
		ctx := context.Background()
		db := openTest(t)
		dup := LimitSpend{Key: "duplicate_certificates/p/acct/set", Emission: time.Minute, Burst: 2, Cost: 1}
		check := dup
		check.CheckOnly = true
		issue := func(now time.Time) (Order, Certificate) {
			t.Helper()
			o := processingOrder(t, db)
			c, err := issueWith(db, o, now, jobs, dup)
			if err != nil {
				t.Fatalf("issuing at %s: %v", now.Sub(t0), err)
			}
			got, err := db.GetOrder(ctx, "p", o.ID)
			if err != nil || got.Status != "valid" || got.CertificateID != c.ID {
				t.Fatalf("the order after its issuance: %+v %v; want valid with its certificate", got, err)
			}
			return o, c
		}
		first, _ := issue(t0)
		if got, want := bucketTAT(t, db, dup.Key), t0.Add(time.Minute).UnixNano(); got != want {
			t.Fatalf("after one issuance the bucket's TAT is %d; want %d, one unit spent", got, want)
		}
		issue(t0)
		full := t0.Add(2 * time.Minute).UnixNano()
		if got := bucketTAT(t, db, dup.Key); got != full {
			t.Fatalf("after two issuances the bucket's TAT is %d; want %d", got, full)
		}
		// A third certificate of the set (its order checked while
		// the bucket had room) is stored; its spend is dropped.
		issue(t0)
		if got := bucketTAT(t, db, dup.Key); got != full {
			t.Fatalf("a spend over the limit moved the bucket to %d; want it dropped (%d)", got, full)
		}
		if out, ok := spend(t, db, t0, check); ok || out[0].RetryAfter != time.Minute {
			t.Fatalf("the check after the limit's certificates: %v %+v; want denied for a minute", ok, out)
		}
		// The same order issued again: nothing spent.
		if _, err := issueWith(db, first, t0.Add(time.Minute), jobs, dup); !errors.Is(err, ErrWrongState) {
			t.Fatalf("issuing an issued order: %v; want ErrWrongState", err)
		}
		if got := bucketTAT(t, db, dup.Key); got != full {
			t.Fatalf("an issuance that moved no order spent: TAT %d; want %d", got, full)
		}
		// A unit refilled, the next certificate takes it.
		issue(t0.Add(time.Minute))
		if got, want := bucketTAT(t, db, dup.Key), t0.Add(3*time.Minute).UnixNano(); got != want {
			t.Fatalf("after the refill and one more issuance the TAT is %d; want %d", got, want)
		}
	})
}

// What an issuance cannot spend is refused before anything is written:
// a check, the pending authorizations cap, a key twice, a cost over the
// burst. The order stays processing, without a certificate.
func TestAnIssuanceRefusesSpendsItCannotTakeAndWritesNothing(t *testing.T) {
	dup := LimitSpend{Key: "duplicate_certificates/p/acct/set", Emission: time.Minute, Burst: 2, Cost: 1}
	with := func(f func(*LimitSpend)) LimitSpend {
		s := dup
		f(&s)
		return s
	}
	tests := []struct {
		name   string
		spends []LimitSpend
	}{
		{"a check", []LimitSpend{with(func(s *LimitSpend) { s.CheckOnly = true })}},
		{"the pending authorizations cap", []LimitSpend{with(func(s *LimitSpend) { s.PendingAuthzs = true })}},
		{"a key twice", []LimitSpend{dup, dup}},
		{"a cost over the burst", []LimitSpend{with(func(s *LimitSpend) { s.Cost = 3 })}},
		{"no emission interval", []LimitSpend{with(func(s *LimitSpend) { s.Emission = 0 })}},
	}
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				o := processingOrder(t, db)
				if _, err := issueWith(db, o, t0, false, tc.spends...); err == nil {
					t.Fatalf("issued with %+v; want an error", tc.spends)
				}
				got, err := db.GetOrder(context.Background(), "p", o.ID)
				if err != nil || got.Status != "processing" || got.CertificateID != "" {
					t.Fatalf("the order after the refused issuance: %+v %v; want processing, no certificate", got, err)
				}
				if tat := bucketTAT(t, db, dup.Key); tat != 0 {
					t.Fatalf("the refused issuance wrote the bucket: TAT %d", tat)
				}
			})
		}
	})
}

// Concurrent issuances for one identifier set, through two stores on one
// database (two instances), take exactly the bucket's burst between them
// and store every certificate: each spend is decided on the bucket's
// newest row, so none is lost to another's and none goes over. Both
// issuance paths (PostgreSQL's one statement, and the transaction a
// notification job makes).
func TestConcurrentIssuancesForOneSetTakeExactlyTheBurstAndStoreEveryCertificate(t *testing.T) {
	eachIssuancePath(t, func(t *testing.T, jobs bool) {
		place := newPlace(t)
		dbs := []*DB{openAt(t, place), openAt(t, place)}
		const burst, issuances = 3, 8
		dup := LimitSpend{Key: "duplicate_certificates/p/acct/set", Emission: time.Minute, Burst: burst, Cost: 1}
		orders := make([]Order, issuances)
		for i := range orders {
			orders[i] = processingOrder(t, dbs[0])
		}
		errs := concurrently(issuances, func(i int) error {
			_, err := issueWith(dbs[i%2], orders[i], t0, jobs, dup)
			return err
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("issuance %d: %v; want every certificate stored", i, err)
			}
		}
		for _, o := range orders {
			got, err := dbs[1].GetOrder(context.Background(), "p", o.ID)
			if err != nil || got.Status != "valid" || got.CertificateID == "" {
				t.Fatalf("order %s after the issuances: %+v %v; want valid with a certificate", o.ID, got, err)
			}
		}
		if got, want := bucketTAT(t, dbs[0], dup.Key), t0.Add(burst*time.Minute).UnixNano(); got != want {
			t.Errorf("the bucket's TAT after %d concurrent issuances is %s past now; want %s (the burst taken, the rest dropped)",
				issuances, time.Duration(got-t0.UnixNano()), time.Duration(want-t0.UnixNano()))
		}
	})
}
