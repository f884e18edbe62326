package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// sharedDER is a CRL's stand-in DER of size bytes whose first and last
// parts say which CRL it is (as partedDER's bytes do) and whose parts
// between are the same in every CRL: a regeneration that lists what the
// one before did (a new thisUpdate and number up front, a new signature
// at the end).
func sharedDER(number int64, publisher byte, size int) []byte {
	der := partedDER(number, publisher, size)
	for i := crlPartSize; i < (len(splitCRL(der))-1)*crlPartSize; i++ {
		der[i] = byte(i * 13)
	}
	return der
}

// storedDERBytes is how many bytes of DER an issuer's stored parts hold.
func storedDERBytes(t testing.TB, db *DB, issuerKeyID string) int64 {
	t.Helper()
	var n int64
	if err := db.r.QueryRow(db.q(`SELECT COALESCE(SUM(LENGTH(der)), 0) FROM crl_parts WHERE issuer_key_id = ?`), issuerKeyID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// heldByOf maps each part of the issuer's CRL number to the number of
// the CRL whose row holds its bytes, 0 for a part that holds its own.
func heldByOf(t testing.TB, db *DB, number int64) map[int]int64 {
	t.Helper()
	return queryPairs[int, int64](t, db, `SELECT part, COALESCE(held_by, 0) FROM crl_parts WHERE issuer_key_id = 'ca' AND number = ?`, number)
}

// unnamedCRL is a CRL of issuer "ca" numbered number, not yet stored, and
// its parts, each holding its bytes.
func unnamedCRL(number int64, der []byte) (CRL, []crlPart) {
	crl := CRL{IssuerKeyID: "ca", Number: number, ThisUpdate: t0, NextUpdate: t0.Add(time.Hour), UpdatedAt: t0, DER: der}
	return crl, holdingAll(splitCRL(der))
}

// crlsBetweenTheirWrites publishes a first CRL of four parts, then starts
// two more: B has taken its number and written all its parts but the last,
// its parts between differing from the first CRL's; C, numbered after B,
// has found the parts it shares with the first CRL (still the stored one)
// and written nothing yet.
func crlsBetweenTheirWrites(t *testing.T, db *DB) (first, b CRL, bParts []crlPart, c CRL, cParts []crlPart) {
	t.Helper()
	const size = 3*crlPartSize + 100
	first = publishDER(t, db, func(n int64) []byte { return sharedDER(n, 1, size) })
	b, bParts = unnamedCRL(first.Number+1, partedDER(first.Number+1, 2, size))
	if err := db.writeCRLParts(context.Background(), "CN=ca", b, bParts[:len(bParts)-1]); err != nil {
		t.Fatal(err)
	}
	c, cParts = unnamedCRL(first.Number+2, sharedDER(first.Number+2, 3, size))
	if err := db.shareCRLParts(context.Background(), "ca", cParts); err != nil {
		t.Fatal(err)
	}
	return first, b, bParts, c, cParts
}

// readsBack checks that the issuer's served CRL is want, byte for byte.
func readsBack(t testing.TB, db *DB, want CRL) {
	t.Helper()
	got, err := db.GetCRL(context.Background(), "ca")
	if err != nil {
		t.Fatalf("reading CRL %d back: %v", want.Number, err)
	}
	if got.Number != want.Number || !bytes.Equal(got.DER, want.DER) {
		t.Fatalf("served CRL %d (%d bytes, the published ones: %v); want CRL %d", got.Number, len(got.DER), bytes.Equal(got.DER, want.DER), want.Number)
	}
}

func TestACRLRepublishedWithTheSamePartsBetweenStoresThoseOnlyOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		const size = 4*crlPartSize + 100 // five parts, three of them between
		first := publishDER(t, db, func(n int64) []byte { return sharedDER(n, 1, size) })
		second := publishDER(t, db, func(n int64) []byte { return sharedDER(n, 2, size) })
		readsBack(t, db, second)
		if got := storedDERBytes(t, db, "ca"); got != size {
			t.Errorf("after the second CRL: %d bytes of DER stored; want %d, one copy of the parts the two share", got, size)
		}
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 2 || stored[first.Number] != 3 || stored[second.Number] != 5 {
			t.Errorf("stored parts by number: %v; want the first CRL's 3 shared ones and the second's 5", stored)
		}

		// A third shares them too, with the first's rows that hold them
		// (not the second's, which only name them): the second's go.
		third := publishDER(t, db, func(n int64) []byte { return sharedDER(n, 3, size) })
		readsBack(t, db, third)
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 2 || stored[first.Number] != 3 || stored[third.Number] != 5 {
			t.Errorf("stored parts by number after a third CRL: %v; want the first CRL's 3 shared ones and the third's 5", stored)
		}
		if got := storedDERBytes(t, db, "ca"); got != size {
			t.Errorf("after the third CRL: %d bytes of DER stored; want %d", got, size)
		}

		// One whose parts between differ (an entry expired, and every
		// entry after it moved) writes them, and the shared ones go.
		fourth := publishDER(t, db, func(n int64) []byte { return partedDER(n, 4, size) })
		readsBack(t, db, fourth)
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 1 || stored[fourth.Number] != 5 {
			t.Errorf("stored parts by number after a CRL with other parts between: %v; want only its 5", stored)
		}
		if got := storedDERBytes(t, db, "ca"); got != size {
			t.Errorf("after the fourth CRL: %d bytes of DER stored; want %d", got, size)
		}
	})
}

func TestACRLIsNotSharedWithAPartThatDiffersInOneByte(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		const size = 3*crlPartSize + 100
		first := publishDER(t, db, func(n int64) []byte { return sharedDER(n, 1, size) })
		second := publishDER(t, db, func(n int64) []byte {
			der := sharedDER(n, 2, size)
			der[crlPartSize+crlPartSize/2] ^= 1
			return der
		})
		readsBack(t, db, second)
		if held := heldByOf(t, db, second.Number); held[1] != 0 || held[2] != first.Number {
			t.Errorf("the second CRL's parts 1 and 2 are held by %d and %d; want the changed one by itself (0), the other by the first CRL (%d)", held[1], held[2], first.Number)
		}
	})
}

// A CRL names the rows of the stored CRL that hold the parts it shares;
// if another CRL is named before it and takes those rows with it, the
// CRL is refused at its last write, leaves no part behind, and the next
// CRL published is stored whole.
func TestACRLWhoseSharedPartsWentWithAnotherCRLIsRefusedAndLeavesNothing(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		first, b, bParts, c, cParts := crlsBetweenTheirWrites(t, db)
		// CRL C shares the first CRL's parts, still the stored one's...
		if cParts[1].heldBy != first.Number || cParts[2].heldBy != first.Number {
			t.Fatalf("CRL C's parts between name %d and %d; want the first CRL's rows, %d", cParts[1].heldBy, cParts[2].heldBy, first.Number)
		}
		// ...until B is named, and the first CRL's parts go.
		if _, err := db.finishCRL(ctx, "CN=ca", b, first.LedgerSeq, bParts, nil); err != nil {
			t.Fatal(err)
		}
		if err := db.writeCRLParts(ctx, "CN=ca", c, cParts[:len(cParts)-1]); err != nil {
			t.Fatal(err)
		}
		if _, err := db.finishCRL(ctx, "CN=ca", c, first.LedgerSeq, cParts, nil); !errors.Is(err, errCRLPartGone) {
			t.Fatalf("the last write of CRL C, its shared parts gone: %v; want errCRLPartGone", err)
		}
		readsBack(t, db, b)
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 1 || stored[b.Number] != 4 {
			t.Errorf("stored parts by number after C was refused: %v; want only B's 4", stored)
		}
	})
}

// The parts a CRL shared go once no stored CRL names them, however few
// rows the deletion that frees them takes.
func TestACRLThatSharesNothingWithTheOneBeforeLeavesOnlyItsOwnParts(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		db := openTest(t)
		const size = 2*crlPartSize + 100 // three parts, one between
		publishDER(t, db, func(n int64) []byte { return sharedDER(n, 1, size) })
		publishDER(t, db, func(n int64) []byte { return sharedDER(n, 2, size) })
		third := publishDER(t, db, func(n int64) []byte { return partedDER(n, 3, size) })
		readsBack(t, db, third)
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 1 || stored[third.Number] != 3 {
			t.Errorf("stored parts by number: %v; want only the third CRL's 3", stored)
		}
	})
}

// A CRL whose named parts are written but which is not yet named keeps
// the rows it names through another CRL's naming (and deletions), and
// reads back whole once it is named in turn.
func TestACRLNotYetNamedKeepsThePartsItSharesThroughAnotherCRLsNaming(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		first, b, bParts, c, cParts := crlsBetweenTheirWrites(t, db)
		if err := db.writeCRLParts(ctx, "CN=ca", c, cParts[:len(cParts)-1]); err != nil {
			t.Fatal(err)
		}
		if _, err := db.finishCRL(ctx, "CN=ca", b, first.LedgerSeq, bParts, nil); err != nil {
			t.Fatal(err)
		}
		readsBack(t, db, b)
		if _, err := db.finishCRL(ctx, "CN=ca", c, first.LedgerSeq, cParts, nil); err != nil {
			t.Fatalf("the last write of C, named after B: %v", err)
		}
		readsBack(t, db, c)
		if stored := crlPartsOf(t, db, "ca"); len(stored) != 2 || stored[first.Number] != 2 || stored[c.Number] != 4 {
			t.Errorf("stored parts by number: %v; want C's 4 and the first CRL's 2 that C names", stored)
		}
	})
}
