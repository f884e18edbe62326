package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// partedDER is a CRL's stand-in DER of size bytes that says, throughout,
// which CRL it is: its first bytes hold number and publisher, and every
// byte after them is a function of both and its offset, so that bytes of
// another CRL anywhere in it show.
func partedDER(number int64, publisher byte, size int) []byte {
	der := make([]byte, size)
	var head [9]byte
	binary.BigEndian.PutUint64(head[:], uint64(number))
	head[8] = publisher
	n := copy(der, head[:])
	for i := n; i < size; i++ {
		der[i] = byte(int64(i)*31+number*7) ^ publisher
	}
	return der
}

// crlPartsOf lists the stored parts of an issuer's CRLs: how many each
// number has.
func crlPartsOf(t testing.TB, db *DB, issuerKeyID string) map[int64]int {
	t.Helper()
	return queryPairs[int64, int](t, db, `SELECT number, COUNT(*) FROM crl_parts WHERE issuer_key_id = ? GROUP BY number`, issuerKeyID)
}

// queryPairs maps the first column of stmt's rows to the second.
func queryPairs[K comparable, V any](t testing.TB, db *DB, stmt string, args ...any) map[K]V {
	t.Helper()
	rows, err := db.r.Query(db.q(stmt), args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[K]V{}
	for rows.Next() {
		var (
			k K
			v V
		)
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// publishDER publishes a CRL of the issuer "ca" whose DER is der(number).
func publishDER(t testing.TB, db *DB, der func(number int64) []byte) CRL {
	t.Helper()
	crl, err := db.PublishCRL(context.Background(), "ca", "CN=ca", t0, func(number int64, _ []CRLEntry) ([]byte, time.Time, time.Time, error) {
		return der(number), t0, t0.Add(time.Hour), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return crl
}

func TestACRLStoredInPartsReadsBackByteForByte(t *testing.T) {
	for _, c := range []struct {
		name  string
		size  int
		parts int
	}{
		{"one byte", 1, 1},
		{"exactly one part", crlPartSize, 1},
		{"one byte more than a part", crlPartSize + 1, 2},
		{"a CRL of 100,000 entries", 4_900_000, 19},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				db := openTest(t)
				published := publishDER(t, db, func(number int64) []byte { return partedDER(number, 1, c.size) })
				got, err := db.GetCRL(context.Background(), "ca")
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.DER, published.DER) || len(got.DER) != c.size {
					t.Errorf("read back %d bytes (the same: %v); want the %d published", len(got.DER), bytes.Equal(got.DER, published.DER), c.size)
				}
				if parts := crlPartsOf(t, db, "ca"); len(parts) != 1 || parts[published.Number] != c.parts {
					t.Errorf("stored parts by number: %v; want %d of number %d", parts, c.parts, published.Number)
				}
			})
		})
	}
}

func TestACRLsInfoIsWhatItsFullReadSaysWithoutTheDER(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		ctx := context.Background()
		if _, err := db.GetCRLInfo(ctx, "ca"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("info of an issuer without a CRL: %v; want ErrNotFound", err)
		}
		publishDER(t, db, func(number int64) []byte { return partedDER(number, 1, crlPartSize+1) })
		published := publishDER(t, db, func(number int64) []byte { return partedDER(number, 2, 3*crlPartSize) })
		full, err := db.GetCRL(ctx, "ca")
		if err != nil {
			t.Fatal(err)
		}
		info, err := db.GetCRLInfo(ctx, "ca")
		if err != nil {
			t.Fatal(err)
		}
		if info.DER != nil {
			t.Errorf("info carries %d bytes of DER; want none", len(info.DER))
		}
		full.DER = nil
		if fmt.Sprint(info) != fmt.Sprint(full) || info.Number != published.Number {
			t.Errorf("info %+v; want the full read's %+v, number %d", info, full, published.Number)
		}
	})
}

// A publisher that dies between its first writes (the parts) and its
// last (the crls row naming them) leaves the CRL before served, and its
// parts go with the next CRL stored, as do the CRL before's.
func TestACRLWhosePartsWereStoredWithoutItsLastWriteIsNeitherServedNorKept(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		const size = 3*crlPartSize + 100
		first := publishDER(t, db, func(number int64) []byte { return partedDER(number, 1, size) })

		// The dead publisher's CRL: every part but the last written.
		dead, parts := unnamedCRL(first.Number+1, partedDER(first.Number+1, 2, size))
		if err := db.writeCRLParts(ctx, "CN=ca", dead, parts[:len(parts)-1]); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetCRL(ctx, "ca")
		if err != nil {
			t.Fatal(err)
		}
		if got.Number != first.Number || !bytes.Equal(got.DER, first.DER) {
			t.Fatalf("served after a publisher died mid-write: CRL %d (bytes the first's: %v); want the first, %d", got.Number, bytes.Equal(got.DER, first.DER), first.Number)
		}
		if n, err := db.CRLNumber(ctx, "ca"); err != nil || n != first.Number {
			t.Fatalf("CRLNumber after a publisher died mid-write: %d, %v; want %d", n, err, first.Number)
		}

		next := publishDER(t, db, func(number int64) []byte { return partedDER(number, 3, size) })
		if next.Number <= dead.Number {
			t.Errorf("the CRL after the dead one is numbered %d; want above the dead one's %d", next.Number, dead.Number)
		}
		got, err = db.GetCRL(ctx, "ca")
		if err != nil {
			t.Fatal(err)
		}
		if got.Number != next.Number || !bytes.Equal(got.DER, next.DER) {
			t.Errorf("served: CRL %d (its own bytes: %v); want the next one, %d", got.Number, bytes.Equal(got.DER, next.DER), next.Number)
		}
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 1 || stored[next.Number] != 4 {
			t.Errorf("stored parts by number after the next CRL: %v; want only its 4 (number %d)", stored, next.Number)
		}
	})
}

// A CRL whose last write finds a higher number named (another publisher,
// which took its number later, stored first) is not stored, and leaves
// no part behind: those written before the other was stored go with it,
// those written after with the refusal.
func TestACRLOvertakenBeforeItsLastWriteLeavesNoParts(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		const size = 2*crlPartSize + 1
		slow, parts := unnamedCRL(1, partedDER(1, 1, size))
		if err := db.writeCRLParts(ctx, "CN=ca", slow, parts[:1]); err != nil {
			t.Fatal(err)
		}
		fast := publishDER(t, db, func(number int64) []byte { return partedDER(number, 2, size) })
		if err := db.withTx(ctx, func(tx *sql.Tx) error { return insertCRLPart(ctx, tx, db, slow, 1, parts[1]) }); err != nil {
			t.Fatal(err)
		}
		if _, err := db.finishCRL(ctx, "CN=ca", slow, 0, parts, nil); !errors.Is(err, errCRLNumberTaken) {
			t.Fatalf("the last write of CRL 1 with CRL %d stored: %v; want errCRLNumberTaken", fast.Number, err)
		}
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 1 || stored[fast.Number] != 3 {
			t.Errorf("stored parts by number: %v; want only the stored CRL's 3 (number %d)", stored, fast.Number)
		}
		got, err := db.GetCRL(ctx, "ca")
		if err != nil || got.Number != fast.Number || !bytes.Equal(got.DER, fast.DER) {
			t.Errorf("served: CRL %d, %v; want the stored one, %d, byte for byte", got.Number, err, fast.Number)
		}
	})
}

// Instances publishing one issuer's CRLs at once, each CRL in several
// parts, while others read: every CRL read is one CRL's bytes, whole,
// never parts of two — whether each CRL's parts are its own, or the
// parts between are the same in every CRL, and shared.
func TestConcurrentPublishersOfACRLInPartsNeverServeAMixOfTwo(t *testing.T) {
	for _, shape := range []struct {
		name string
		der  func(number int64, publisher byte, size int) []byte
		// shared: a part shared by a CRL refused at its last write
		// stays until the next CRL is stored; one more is, alone, before
		// the parts left are counted.
		shared bool
	}{
		{"each CRL its own parts", partedDER, false},
		{"the parts between shared", sharedDER, true},
	} {
		t.Run(shape.name, func(t *testing.T) { concurrentPublishers(t, shape.der, shape.shared) })
	}
}

func concurrentPublishers(t *testing.T, shape func(number int64, publisher byte, size int) []byte, shared bool) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		place := newPlace(t)
		const publishers, rounds, size = 3, 6, 3*crlPartSize + 7
		dbs := make([]*DB, publishers+1)
		for i := range dbs {
			dbs[i] = openAt(t, place)
		}
		var (
			done    atomic.Bool
			readers sync.WaitGroup
			reads   atomic.Int64
			mixed   atomic.Value
		)
		readers.Add(1)
		go func() {
			defer readers.Done()
			reader := dbs[publishers]
			for !done.Load() {
				crl, err := reader.GetCRL(ctx, "ca")
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					mixed.Store(err.Error())
					return
				}
				reads.Add(1)
				number := int64(-1)
				if len(crl.DER) >= 9 {
					number = int64(binary.BigEndian.Uint64(crl.DER))
				}
				if ok := len(crl.DER) == size && bytes.Equal(crl.DER, shape(number, crl.DER[8], size)); !ok || number != crl.Number {
					mixed.Store(fmt.Sprintf("CRL %d read as %d bytes naming CRL %d, one CRL's throughout: %v", crl.Number, len(crl.DER), number, ok))
					return
				}
			}
		}()
		seen := map[int64]int{}
		var (
			mu        sync.Mutex
			overtaken atomic.Int64
		)
		errs := concurrently(publishers, func(i int) error {
			for range rounds {
				crl, err := dbs[i].PublishCRL(ctx, "ca", "CN=ca", t0, func(number int64, _ []CRLEntry) ([]byte, time.Time, time.Time, error) {
					return shape(number, byte(i), size), t0, t0.Add(time.Hour), nil
				})
				if errors.Is(err, errCRLNumberTaken) || errors.Is(err, errCRLPartGone) {
					// Overtaken on every attempt: the others stored theirs
					// meanwhile (a job would run again).
					overtaken.Add(1)
					continue
				}
				if err != nil {
					return err
				}
				mu.Lock()
				seen[crl.Number]++
				mu.Unlock()
			}
			return nil
		})
		done.Store(true)
		readers.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("publisher %d: %v", i, err)
			}
		}
		if m := mixed.Load(); m != nil {
			t.Fatalf("a reader saw %s", m)
		}
		if len(seen) < rounds {
			t.Errorf("%d CRLs published by %d publishers of %d each (%d overtaken on every attempt); want at least %d", len(seen), publishers, rounds, overtaken.Load(), rounds)
		}
		for number, n := range seen {
			if n != 1 {
				t.Errorf("cRLNumber %d published %d times; want once", number, n)
			}
		}
		if shared {
			readsBack(t, dbs[0], publishDER(t, dbs[0], func(n int64) []byte { return shape(n, publishers, size) }))
		}
		got, err := dbs[0].GetCRL(ctx, "ca")
		if err != nil {
			t.Fatal(err)
		}
		// Left: the served CRL's parts, and the rows that hold those it
		// names; one copy of its bytes.
		named := map[int64]bool{got.Number: true}
		for _, by := range heldByOf(t, dbs[0], got.Number) {
			named[by] = true
		}
		stored := crlPartsOf(t, dbs[0], "ca")
		for number := range stored {
			if !named[number] {
				t.Errorf("stored parts by number once every publisher is done: %v; CRL %d's are left, which the served CRL %d does not name", stored, number, got.Number)
			}
		}
		if stored[got.Number] != 4 || storedDERBytes(t, dbs[0], "ca") != size {
			t.Errorf("once every publisher is done: %v parts by number, %d bytes; want the served CRL's 4 (number %d) and one copy of its %d bytes",
				stored, storedDERBytes(t, dbs[0], "ca"), got.Number, size)
		}
		t.Logf("%d reads, %d CRLs published, %d publications overtaken on every attempt", reads.Load(), len(seen), overtaken.Load())
	})
}

// Upgrading a database whose crls rows hold their DER (schema 22) keeps
// each stored CRL served as it was, as its one part.
func TestUpgradingKeepsTheStoredCRLServedByteForByte(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	raw := oldSchemaDB(t, path, 22)
	der := partedDER(7, 1, 3*crlPartSize+5)
	if _, err := raw.Exec(`INSERT INTO crls (issuer_key_id, number, this_update, next_update, ledger_seq, entries, der, updated_at)
		VALUES ('ca', 7, ?, ?, 3, 100, ?, ?)`, t0.UnixMilli(), t0.Add(time.Hour).UnixMilli(), der, t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO crl_numbers (issuer_key_id, last) VALUES ('ca', 7)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	db, err := OpenSQLite(ctx, path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.GetCRL(ctx, "ca")
	if err != nil {
		t.Fatal(err)
	}
	want := CRL{IssuerKeyID: "ca", Number: 7, ThisUpdate: t0, NextUpdate: t0.Add(time.Hour), LedgerSeq: 3, Entries: 100, UpdatedAt: t0}
	if !bytes.Equal(got.DER, der) {
		t.Errorf("the CRL stored before the upgrade read back as %d bytes, equal: false; want its %d bytes", len(got.DER), len(der))
	}
	got.DER = nil
	if !got.ThisUpdate.Equal(want.ThisUpdate) || got.Number != want.Number || got.LedgerSeq != want.LedgerSeq || got.Entries != want.Entries {
		t.Errorf("after the upgrade: %+v; want %+v", got, want)
	}
	// The next one continues the sequence, in parts, and the old one goes.
	next := publishDER(t, db, func(number int64) []byte { return partedDER(number, 2, 2*crlPartSize+1) })
	if next.Number != 8 {
		t.Errorf("the first CRL after the upgrade: number %d; want 8", next.Number)
	}
	if stored := crlPartsOf(t, db, "ca"); len(stored) != 1 || stored[8] != 3 {
		t.Errorf("stored parts by number: %v; want only CRL 8's 3", stored)
	}
}
