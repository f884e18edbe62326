package store

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
)

// publishFrom publishes a CRL of issuer "ca" at now from base, and
// returns it with what its build was given.
func publishFrom(t *testing.T, db *DB, now time.Time, base *CRLBase) (CRL, CRLRead) {
	t.Helper()
	var read CRLRead
	crl, err := db.PublishCRLFrom(context.Background(), "ca", "CN=ca", now, now, base, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
		read = r
		return []byte{byte(r.Number)}, now, now.Add(24 * time.Hour), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return crl, read
}

// baseOf is what a publisher keeps of crl, which lists entries and was
// built from read.
func baseOf(crl CRL, read CRLRead, entries []CRLEntry) *CRLBase {
	return &CRLBase{Number: crl.Number, Seq: crl.LedgerSeq, Mark: read.Mark, Count: int64(len(entries))}
}

func serialsOf(entries []CRLEntry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Serial)
	}
	return out
}

// ledgerRow records a revocation of c for issuer "ca" with the ledger id
// id, as a writer that took id before others and committed after them
// leaves it.
func ledgerRow(t *testing.T, db *DB, c Certificate, id int64) {
	t.Helper()
	if _, err := rawW(db).Exec(`INSERT INTO revocations
		(id, certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind)
		VALUES (?, ?, 'p', ?, ?, 'ca', 4, ?, ?, 'admin')`,
		id, c.ID, c.OrderID, c.Serial, t0.Add(time.Minute).UnixMilli(), c.NotAfter.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if _, err := rawW(db).Exec(`UPDATE certificates SET revoked_at = ?, revocation_reason = 4 WHERE id = ?`,
		t0.Add(time.Minute).UnixMilli(), c.ID); err != nil {
		t.Fatal(err)
	}
}

// sameEntries reports whether a and b list the same entries, in order.
func sameEntries(a, b []CRLEntry) bool {
	return slices.EqualFunc(a, b, func(x, y CRLEntry) bool {
		return x.Serial == y.Serial && x.ID == y.ID && x.RevokedAt.Equal(y.RevokedAt) && x.NotAfter.Equal(y.NotAfter) &&
			(x.Reason == nil) == (y.Reason == nil) && (x.Reason == nil || *x.Reason == *y.Reason)
	})
}

// A publisher that keeps the entries of its last CRL gets only the
// revocations recorded after it, and what it is told to list adds up to
// what a full read lists.
func TestACRLBuiltFromTheLastOneGetsOnlyTheRevocationsRecordedAfterIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		a := issuedCert(t, db, "0a", t0.Add(time.Hour))
		b := issuedCert(t, db, "0b", t0.Add(48*time.Hour))
		c := issuedCert(t, db, "0c", t0.Add(48*time.Hour))
		other := issuedCert(t, db, "0d", t0.Add(48*time.Hour))
		gone := issuedCert(t, db, "0e", t0.Add(time.Minute))
		for _, cert := range []Certificate{a, b} {
			if _, err := revoke(t, db, cert, "ca", 4); err != nil {
				t.Fatal(err)
			}
		}
		first, read := publishFrom(t, db, t0.Add(time.Minute), nil)
		if read.Delta || !slices.Equal(serialsOf(read.Entries), []string{"0a", "0b"}) {
			t.Fatalf("the first CRL read %v (delta %v); want 0a and 0b in full", serialsOf(read.Entries), read.Delta)
		}
		listed := read.Entries
		// After it: c, a certificate already expired when the next CRL is
		// built (the CA's last ledger row), and another CA's certificate.
		revC, err := revoke(t, db, c, "ca", 1)
		if err != nil {
			t.Fatal(err)
		}
		revGone, err := revoke(t, db, gone, "ca", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := revoke(t, db, other, "other-ca", 1); err != nil {
			t.Fatal(err)
		}
		second, read := publishFrom(t, db, t0.Add(2*time.Minute), baseOf(first, read, listed))
		if !read.Delta || !slices.Equal(serialsOf(read.Entries), []string{"0c"}) || read.Entries[0].ID != revC.ID ||
			read.Entries[0].Reason == nil || *read.Entries[0].Reason != 1 || !read.Entries[0].NotAfter.Equal(c.NotAfter) {
			t.Fatalf("the second CRL read %+v (delta %v); want only 0c (not another CA's 0d, nor the expired 0e), row %d, reason 1, with its notAfter",
				read.Entries, read.Delta, revC.ID)
		}
		if second.Number != first.Number+1 || second.Entries != 3 || second.LedgerSeq != revGone.ID {
			t.Errorf("the second CRL is #%d with %d entries up to row %d; want #%d with 3 up to the CA's last row %d",
				second.Number, second.Entries, second.LedgerSeq, first.Number+1, revGone.ID)
		}
		if stale, err := db.StaleCRLIssuers(context.Background()); err != nil || !slices.Equal(stale, []string{"other-ca"}) {
			t.Errorf("stale issuers %v (%v); want only other-ca, which has no CRL", stale, err)
		}
		listed = append(listed, read.Entries...)
		full, err := db.crlSnapshot(context.Background(), "ca", "CN=ca", t0.Add(2*time.Minute), nil)
		if err != nil || !sameEntries(full.Entries, listed) {
			t.Errorf("a full read lists %+v (%v); the base and the rows after it %+v", full.Entries, err, listed)
		}

		// Past a's notAfter the publisher drops it from what it keeps,
		// and nothing new is read.
		later := t0.Add(2 * time.Hour)
		third, read := publishFrom(t, db, later, baseOf(second, read, listed[1:]))
		if !read.Delta || len(read.Entries) != 0 || third.Entries != 2 || third.Number != second.Number+1 {
			t.Errorf("the third CRL read %v (delta %v) and has %d entries as #%d; want nothing new, 2 entries, #%d",
				serialsOf(read.Entries), read.Delta, third.Entries, third.Number, second.Number+1)
		}
	})
}

// A ledger row can commit after a CRL read the rows above its id (on
// PostgreSQL ids are taken at insert, commits come in any order); reading
// only the rows after that CRL's seq would miss it on every CRL after.
// The store reads the ledger in full whenever what lies below the base's
// seq is not what the base holds.
func TestACRLIsReadInFullWhenTheLedgerBelowItsBaseChanged(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, db *DB, s ledgerScene)
		delta  bool
		want   []string
		reason int // of 0e
		// only names the one dialect where the change can happen: SQLite
		// commits ledger rows in the order of their ids. (Nothing deletes
		// a ledger row while it is on a CRL: the retention sweep deletes
		// one only past its certificate's notAfter.)
		only string
	}{
		{"delta/nothing changed", func(*testing.T, *DB, ledgerScene) {}, true, nil, 4, ""},
		{"full/a row committed late below the base's seq", func(t *testing.T, db *DB, s ledgerScene) {
			ledgerRow(t, db, s.late, s.first.ID+5)
		}, false, []string{"0d", "1a", "0e"}, 4, "postgres"},
		{"full/a row deleted and another committed late, as many as before", func(t *testing.T, db *DB, s ledgerScene) {
			if _, err := rawW(db).Exec(`DELETE FROM revocations WHERE id = ?`, s.first.ID); err != nil {
				t.Fatal(err)
			}
			ledgerRow(t, db, s.late, s.first.ID+5)
		}, false, []string{"1a", "0e"}, 4, "postgres"},
		{"full/another publisher stored a CRL", func(t *testing.T, db *DB, s ledgerScene) {
			publishFrom(t, db, t0.Add(time.Minute), nil)
		}, false, []string{"0d", "0e"}, 4, ""},
		{"full/a revocation reason changed", func(t *testing.T, db *DB, s ledgerScene) {
			if err := db.ChangeRevocationReason(context.Background(), s.second.CertificateID, 1,
				AuditEvent{At: t0, Event: "revocation_reason_changed", Outcome: "success"}); err != nil {
				t.Fatal(err)
			}
		}, false, []string{"0d", "0e"}, 1, ""},
	} {
		for _, d := range testDialects {
			if c.only != "" && d.name != c.only {
				continue
			}
			t.Run(c.name+"/"+d.name, func(t *testing.T) {
				db := openTest(t)
				s := newLedgerScene(t, db)
				c.change(t, db, s)
				crl, read := publishFrom(t, db, t0.Add(2*time.Minute), s.base)
				if read.Delta != c.delta || !slices.Equal(serialsOf(read.Entries), c.want) {
					t.Fatalf("the CRL read %v (delta %v); want %v (delta %v)", serialsOf(read.Entries), read.Delta, c.want, c.delta)
				}
				if c.delta {
					return
				}
				if crl.Entries != len(c.want) {
					t.Errorf("the CRL has %d entries; want %d", crl.Entries, len(c.want))
				}
				for _, e := range read.Entries {
					if e.Serial == "0e" && (e.Reason == nil || *e.Reason != c.reason) {
						t.Errorf("0e is read with reason %v; want %d", e.Reason, c.reason)
					}
				}
			})
		}
	}
}

// On SQLite a ledger row's id is taken inside the write that commits it,
// one write at a time, so a CRL built from the last one reads the ledger
// rows after that one's seq and none below it: for 100,000 revoked
// certificates the count of the rows below was a third of a
// regeneration's CPU.
func TestOnSQLiteACRLBuiltFromTheLastOneReadsNoLedgerRowBelowIt(t *testing.T) {
	var (
		mu        sync.Mutex
		recording bool
		ran       []string
	)
	db := OpenSQLiteObserved(t, func(q string) {
		mu.Lock()
		defer mu.Unlock()
		if recording {
			ran = append(ran, strings.Join(strings.Fields(q), " "))
		}
	})
	s := newLedgerScene(t, db)
	if _, err := revoke(t, db, s.late, "ca", 4); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	recording = true
	mu.Unlock()
	_, read := publishFrom(t, db, t0.Add(2*time.Minute), s.base)
	mu.Lock()
	defer mu.Unlock()
	if !read.Delta || !slices.Equal(serialsOf(read.Entries), []string{"1a"}) {
		t.Fatalf("the CRL read %v (delta %v); want only 1a, after the base", serialsOf(read.Entries), read.Delta)
	}
	ledger := 0
	for _, q := range ran {
		if !strings.Contains(q, "FROM revocations") {
			continue
		}
		ledger++
		if !strings.Contains(q, "WHERE id > ?") {
			t.Errorf("the CRL's read ran a statement over the ledger below its base: %s", q)
		}
	}
	if ledger == 0 {
		t.Errorf("no statement over the ledger among the %d recorded; the recording missed the read", len(ran))
	}
}

// ledgerScene is a ledger of two revocations, 0d and 0e, with a gap of
// ids between them, a CRL published from it and what its publisher keeps
// of it; late is a certificate whose revocation may fill the gap.
type ledgerScene struct {
	first, second Revocation
	late          Certificate
	base          *CRLBase
}

func newLedgerScene(t *testing.T, db *DB) ledgerScene {
	t.Helper()
	d := issuedCert(t, db, "0d", t0.Add(48*time.Hour))
	e := issuedCert(t, db, "0e", t0.Add(48*time.Hour))
	late := issuedCert(t, db, "1a", t0.Add(48*time.Hour))
	first, err := revoke(t, db, d, "ca", 4)
	if err != nil {
		t.Fatal(err)
	}
	ledgerRow(t, db, e, first.ID+10)
	second, err := db.RevocationOf(context.Background(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	crl, read := publishFrom(t, db, t0.Add(time.Minute), nil)
	if crl.LedgerSeq != second.ID || len(read.Entries) != 2 {
		t.Fatalf("the scene's CRL reads %d entries up to row %d; want 2 up to %d", len(read.Entries), crl.LedgerSeq, second.ID)
	}
	return ledgerScene{first: first, second: second, late: late, base: baseOf(crl, read, read.Entries)}
}

// The same on PostgreSQL for real: a revocation whose transaction took
// its id first commits after one that took the next id, and after a CRL
// read the later one. Only PostgreSQL has writers at once; on SQLite ids
// are taken and committed in one order.
func TestOnPostgreSQLARevocationCommittedAfterAHigherOneIsOnTheNextCRL(t *testing.T) {
	ctx := context.Background()
	var pg testDialect
	for _, d := range testDialects {
		if d.name == "postgres" {
			pg = d
		}
	}
	db := pg.open(t)
	t.Cleanup(func() { db.Close() })
	slow := issuedCert(t, db, "0f", t0.Add(48*time.Hour))
	quick := issuedCert(t, db, "10", t0.Add(48*time.Hour))
	tx, err := rawW(db).w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var slowID int64
	if err := tx.QueryRowContext(ctx, db.q(`INSERT INTO revocations
		(certificate_id, profile, order_id, serial, issuer_key_id, reason, revoked_at, not_after, actor_kind)
		VALUES (?, 'p', ?, ?, 'ca', 4, ?, ?, 'admin') RETURNING id`),
		slow.ID, slow.OrderID, slow.Serial, t0.Add(time.Minute).UnixMilli(), slow.NotAfter.UnixMilli()).Scan(&slowID); err != nil {
		t.Fatal(err)
	}
	quickRev, err := revoke(t, db, quick, "ca", 4)
	if err != nil {
		t.Fatal(err)
	}
	if quickRev.ID <= slowID {
		t.Fatalf("the quick revocation took row %d, the slow one %d; the scene needs it above", quickRev.ID, slowID)
	}
	first, read := publishFrom(t, db, t0.Add(time.Minute), nil)
	if !slices.Equal(serialsOf(read.Entries), []string{"10"}) || first.LedgerSeq != quickRev.ID {
		t.Fatalf("the first CRL read %v up to row %d; want only the committed 10, up to %d", serialsOf(read.Entries), first.LedgerSeq, quickRev.ID)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	second, read := publishFrom(t, db, t0.Add(2*time.Minute), baseOf(first, read, read.Entries))
	if read.Delta || !slices.Equal(serialsOf(read.Entries), []string{"0f", "10"}) || second.Entries != 2 {
		t.Errorf("after the slow revocation committed the CRL read %v (delta %v, %d entries); want 0f and 10 in full",
			serialsOf(read.Entries), read.Delta, second.Entries)
	}
}

// A revocation reason changed while a CRL is built is not on that CRL:
// the stored CRL must keep the change's mark (StaleCRLIssuers lists it,
// and a publisher building from it reads the ledger in full), each time
// it happens.
func TestARevocationReasonChangedWhileACRLIsBuiltLeavesItStale(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		c := issuedCert(t, db, "0b", t0.Add(48*time.Hour))
		if _, err := revoke(t, db, c, "ca", 4); err != nil {
			t.Fatal(err)
		}
		crl, read := publishFrom(t, db, t0.Add(time.Minute), nil)
		base := baseOf(crl, read, read.Entries)
		for i, reason := range []int{1, 5} {
			crl, err := db.PublishCRLFrom(ctx, "ca", "CN=ca", t0.Add(time.Minute), t0.Add(time.Minute), base, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
				if err := db.ChangeRevocationReason(ctx, c.ID, reason, AuditEvent{At: t0, Event: "revocation_reason_changed", Outcome: "success"}); err != nil {
					t.Errorf("change %d: %v", i, err)
				}
				return []byte{byte(r.Number)}, t0, t0.Add(24 * time.Hour), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if stale, err := db.StaleCRLIssuers(ctx); err != nil || !slices.Equal(stale, []string{"ca"}) {
				t.Errorf("change %d to reason %d while CRL #%d was built: stale issuers %v (%v); want ca", i, reason, crl.Number, stale, err)
			}
			base = &CRLBase{Number: crl.Number, Seq: read.Seq, Mark: base.Mark, Count: 1}
		}
		_, read = publishFrom(t, db, t0.Add(2*time.Minute), base)
		if read.Delta || len(read.Entries) != 1 || read.Entries[0].Reason == nil || *read.Entries[0].Reason != 5 {
			t.Errorf("the next CRL read %+v (delta %v); want 0b with reason 5, in full", read.Entries, read.Delta)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || len(stale) != 0 {
			t.Errorf("stale issuers %v (%v) after it; want none", stale, err)
		}
	})
}

// BenchmarkStoringACRLOf100000Entries measures the write that stores a
// CRL of 100,000 entries (4.7 MiB) as its issuer's latest: how long it
// holds the store's writer (SQLite's only one), from handing the write to
// the engine to its commit; on PostgreSQL also the WAL it writes. Each
// CRL differs from the one before in its first and last bytes, as a
// regeneration that lists what the one before did (its thisUpdate, its
// number and signature): stored whole (every part written), or with the
// parts the one before has shared (the parts between written once).
//
//	go test -run '^$' -bench StoringACRLOf100000 -benchtime 20x ./store/
func BenchmarkStoringACRLOf100000Entries(b *testing.B) {
	// Random bytes, as a CRL's serials and signature are: PostgreSQL
	// compresses what it stores out of line, and a pattern would cost
	// it next to nothing to write.
	der := make([]byte, 4_900_000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range der {
		der[i] = byte(rng.Uint32())
	}
	for _, d := range testDialects {
		for _, share := range []bool{false, true} {
			name := d.name + "/every part written"
			if share {
				name = d.name + "/parts shared with the one before"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				db := d.open(b)
				defer db.Close()
				wal := func() int64 {
					if d.name != "postgres" {
						return 0
					}
					lsn, err := pgtest.WALPosition(db.r)
					if err != nil {
						b.Fatal(err)
					}
					return lsn
				}
				var number int64
				var walBytes int64
				for b.Loop() {
					number++
					der[0], der[len(der)-1] = byte(number), byte(number) // each CRL its own bytes there
					before := wal()
					if _, err := db.storeCRL(ctx, "CN=ca", CRL{IssuerKeyID: "ca", Number: number, ThisUpdate: t0, NextUpdate: t0.Add(time.Hour),
						Entries: 100000, DER: der, UpdatedAt: t0}, 0, share, nil); err != nil {
						b.Fatal(err)
					}
					walBytes += wal() - before
				}
				if d.name == "postgres" {
					b.ReportMetric(float64(walBytes)/float64(b.N)/(1<<20), "WAL-MiB/op")
				}
			})
		}
	}
}

// A revocation whose write took its ledger id before another's and
// commits after a CRL was stored from a read that saw the other one is
// not on that CRL; if the server dies before queueing its regeneration,
// the CRL refresh must still find the issuer stale. On PostgreSQL the
// late row lies below the CRL's ledger_seq (writers run at once, ids are
// taken at insert); on SQLite the other write waits for the held one and
// both commit after the CRL's read, above its ledger_seq.
func TestARevocationCommittedAfterACRLReadAHigherOneLeavesTheIssuerStale(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		atOnce := dialectOf(t).name == "postgres" // writers run at once
		slow := issuedCert(t, db, "0f", t0.Add(48*time.Hour))
		quick := issuedCert(t, db, "10", t0.Add(48*time.Hour))
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		db.revocationRow = func(certificateID string) {
			if certificateID == slow.ID {
				once.Do(func() { close(held) })
				<-release
			}
		}
		released := false
		releaseOnce := func() {
			if !released {
				released = true
				close(release)
			}
		}
		t.Cleanup(releaseOnce)
		slowDone, quickDone := make(chan error, 1), make(chan error, 1)
		var slowRev, quickRev Revocation
		go func() {
			var err error
			slowRev, err = revoke(t, db, slow, "ca", 4)
			slowDone <- err
		}()
		<-held
		go func() {
			var err error
			quickRev, err = revoke(t, db, quick, "ca", 4)
			quickDone <- err
		}()
		if atOnce {
			if err := <-quickDone; err != nil {
				t.Fatal(err)
			}
		}
		read, published := make(chan CRLRead, 1), make(chan error, 1)
		go func() {
			now := t0.Add(time.Minute)
			_, err := db.PublishCRLFrom(ctx, "ca", "CN=ca", now, now, nil, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
				read <- r
				return []byte{byte(r.Number)}, now, now.Add(24 * time.Hour), nil
			})
			published <- err
		}()
		r := <-read
		if atOnce {
			// The CRL is stored before the slow revocation commits.
			if err := <-published; err != nil {
				t.Fatal(err)
			}
		}
		releaseOnce()
		for _, done := range []chan error{slowDone, quickDone, published} {
			if atOnce && done != slowDone {
				continue // received above
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if atOnce && (slowRev.ID >= quickRev.ID || !slices.Equal(serialsOf(r.Entries), []string{"10"}) || r.Seq != quickRev.ID) {
			t.Fatalf("the CRL read %v up to row %d, the slow revocation took row %d, the quick one %d; the scene needs the CRL to see only the quick one, above the slow one",
				serialsOf(r.Entries), r.Seq, slowRev.ID, quickRev.ID)
		}
		if stale, err := db.StaleCRLIssuers(ctx); err != nil || !slices.Equal(stale, []string{"ca"}) {
			t.Errorf("StaleCRLIssuers = %v, %v after the slow revocation committed; want [ca]", stale, err)
		}
	})
}
