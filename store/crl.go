package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// CRL is the latest CRL of one issuing CA, as published.
type CRL struct {
	IssuerKeyID string
	Number      int64 // cRLNumber
	ThisUpdate  time.Time
	NextUpdate  time.Time
	// LedgerSeq is the last revocation ledger row the CRL took into
	// account.
	LedgerSeq int64
	Entries   int
	DER       []byte
	UpdatedAt time.Time
}

// CRLEntry is a revoked, unexpired certificate a CRL lists.
type CRLEntry struct {
	Serial    string // lower-case hex
	RevokedAt time.Time
	Reason    *int
	// ID is the entry's ledger row; NotAfter is the certificate's, past
	// which CRLs drop the entry.
	ID       int64
	NotAfter time.Time
}

// CRLBuild signs a CRL numbered number listing entries, and returns its
// DER, thisUpdate and nextUpdate.
type CRLBuild func(number int64, entries []CRLEntry) (der []byte, thisUpdate, nextUpdate time.Time, err error)

const crlCols = `issuer_key_id, number, this_update, next_update, ledger_seq, entries, der, updated_at`

func scanCRL(r rowScanner) (CRL, error) {
	var (
		c                     CRL
		this, next, updatedAt int64
	)
	if err := r.Scan(&c.IssuerKeyID, &c.Number, &this, &next, &c.LedgerSeq, &c.Entries, &c.DER, &updatedAt); err != nil {
		return CRL{}, err
	}
	c.ThisUpdate, c.NextUpdate, c.UpdatedAt = ms(this), ms(next), ms(updatedAt)
	return c, nil
}

// GetCRL reads the latest CRL of an issuer.
func (db *DB) GetCRL(ctx context.Context, issuerKeyID string) (CRL, error) {
	c, err := scanCRL(db.r.QueryRowContext(ctx, db.q(`SELECT `+crlCols+` FROM crls WHERE issuer_key_id = ?`), issuerKeyID))
	return c, readErr(err, "CRL of issuer "+issuerKeyID)
}

// PublishCRL builds and stores a new CRL for an issuer: it reads the
// issuer's unexpired ledger entries (a certificate past its notAfter at
// now is dropped) and the next cRLNumber from one read snapshot, has build
// sign the CRL outside any write, and stores it as the issuer's latest in
// a short write that takes the number.
//
// Building and signing a CRL of many entries takes a while (a tenth of a
// second per 10,000 entries or more), and the store has one writer: done
// inside the write, it would stall every issuance behind it. So the write
// only checks that the number read is still the next one — no other CRL
// of the name or the key was stored meanwhile — and, if one was, the CRL
// is built again with a new number, a few times before giving up. A
// revocation committed while the CRL was built is not on it, and the CRL's
// LedgerSeq says so: StaleCRLIssuers lists the issuer until another CRL
// is published. So does a revocation reason changed while it was built
// (ChangeRevocationReason): the stored CRL keeps the mark of the change.
//
// The issuer is its key (issuerKeyID: the ledger and the CRL are per key)
// and its name (issuerName: RFC 5280 §5.2.3 wants cRLNumber to increase
// for a CRL issuer, which verifiers know by name, so a CA renewed with a
// new key under its old name must not start again at 1). The number is one
// above both the name's and the key's counters — the key's counter
// carries a sequence begun before names were counted — and both are set to
// it, committed with the CRL that carries it, so cRLNumber strictly
// increases per name across restarts, keys and instances. A failed build
// takes no number.
func (db *DB) PublishCRL(ctx context.Context, issuerKeyID, issuerName string, now time.Time, build CRLBuild) (CRL, error) {
	return db.PublishCRLFrom(ctx, issuerKeyID, issuerName, now, nil, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
		return build(r.Number, r.Entries)
	})
}

// CRLBase is what a publisher keeps of the last CRL it published of an
// issuer, so that the next one reads only the ledger rows after it
// (PublishCRLFrom).
type CRLBase struct {
	Number int64 // the cRLNumber it was published as
	Seq    int64 // its LedgerSeq: the last ledger row it read
	// Count is the number of its entries still unexpired at the now
	// given to PublishCRLFrom, and IDSum the sum of their ledger ids.
	Count, IDSum int64
}

// CRLRead is what a CRL is built from, read in one snapshot.
type CRLRead struct {
	Number int64 // the cRLNumber the CRL will carry
	Seq    int64 // the last ledger row of the issuer: the CRL's LedgerSeq
	// Delta says that Entries holds only the unexpired ledger rows after
	// the base's Seq, to be listed after the base's unexpired entries;
	// otherwise Entries is every unexpired entry up to Seq. Both are in
	// ledger order.
	Delta   bool
	Entries []CRLEntry
}

// CRLBuildFrom signs the CRL of r, and returns its DER, thisUpdate and
// nextUpdate.
type CRLBuildFrom func(r CRLRead) (der []byte, thisUpdate, nextUpdate time.Time, err error)

// PublishCRLFrom is PublishCRL for a publisher that keeps what its last
// CRL of the issuer listed (base, nil for none): when the ledger up to
// base.Seq still holds exactly what base holds, build gets only the rows
// after it (a Delta read), and every unexpired entry otherwise.
//
// A ledger row's id is taken when it is inserted, not when it commits:
// on PostgreSQL a row with a lower id can commit after one with a higher
// id that a CRL already read, and a read of the rows after that CRL's
// seq would miss it for good. So the rows up to base.Seq are counted and
// their ids summed in the same snapshot, and any difference from base's
// (a row committed late, or one deleted) means a full read; so does a
// stored latest CRL that is not base's (another publisher stored one, or
// a revocation reason changed since, which marks it).
func (db *DB) PublishCRLFrom(ctx context.Context, issuerKeyID, issuerName string, now time.Time, base *CRLBase, build CRLBuildFrom) (CRL, error) {
	if issuerKeyID == "" || issuerName == "" {
		return CRL{}, errors.New("store: publishing a CRL needs an issuer's key id and name")
	}
	const attempts = 4
	for attempt := 1; ; attempt++ {
		snap, err := db.crlSnapshot(ctx, issuerKeyID, issuerName, now, base)
		if err != nil {
			return CRL{}, fmt.Errorf("store: reading the ledger of issuer %s: %w", issuerKeyID, err)
		}
		der, this, next, err := build(snap.CRLRead)
		if err != nil {
			return CRL{}, err
		}
		entries := len(snap.Entries)
		if snap.Delta {
			entries += int(base.Count)
		}
		out := CRL{IssuerKeyID: issuerKeyID, Number: snap.Number, ThisUpdate: this, NextUpdate: next,
			LedgerSeq: snap.Seq, Entries: entries, DER: der, UpdatedAt: now}
		out.LedgerSeq, err = db.storeCRL(ctx, issuerName, out, snap.storedSeq)
		if errors.Is(err, errCRLNumberTaken) && attempt < attempts {
			continue
		}
		if err != nil {
			return CRL{}, fmt.Errorf("store: publishing the CRL of issuer %s: %w", issuerKeyID, err)
		}
		return out, nil
	}
}

// errCRLNumberTaken: another CRL of the issuer's name or key was stored
// while one was being built.
var errCRLNumberTaken = errors.New("another CRL took its cRLNumber while it was built")

// crlSnapshot is what a CRL is built from, read at one moment.
type crlSnapshot struct {
	CRLRead
	// storedSeq is the ledger_seq of the issuer's stored CRL (0 for
	// none): a change of it before the new CRL is stored is a
	// revocation reason changed meanwhile.
	storedSeq int64
}

// crlSnapshot reads, in one read-only transaction (one snapshot), the
// issuer's last ledger row, its unexpired entries up to it (only those
// after base.Seq when the rows up to it are still base's), and the next
// cRLNumber of its name and key.
func (db *DB) crlSnapshot(ctx context.Context, issuerKeyID, issuerName string, now time.Time, base *CRLBase) (crlSnapshot, error) {
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return crlSnapshot{}, err
	}
	defer tx.Rollback()
	var (
		s            crlSnapshot
		storedNumber int64
	)
	err = tx.QueryRowContext(ctx, db.q(`SELECT number, ledger_seq FROM crls WHERE issuer_key_id = ?`), issuerKeyID).
		Scan(&storedNumber, &s.storedSeq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return crlSnapshot{}, err
	}
	stored := err == nil
	if base != nil && stored && storedNumber == base.Number && s.storedSeq == base.Seq {
		var count, sum int64
		if err := tx.QueryRowContext(ctx, db.q(`SELECT COUNT(*), CAST(COALESCE(SUM(id), 0) AS BIGINT) FROM revocations
			WHERE issuer_key_id = ? AND not_after >= ? AND id <= ?`), issuerKeyID, now.UnixMilli(), base.Seq).
			Scan(&count, &sum); err != nil {
			return crlSnapshot{}, err
		}
		s.Delta = count == base.Count && sum == base.IDSum
	}
	var rows *sql.Rows
	if s.Delta {
		// The rows after base.Seq by their ids, the issuer's picked here
		// (the last of them is the new seq): by the issuer's index this
		// would walk every unexpired entry, and so would its MAX(id).
		s.Seq = base.Seq
		rows, err = tx.QueryContext(ctx, db.q(`SELECT id, serial, revoked_at, reason, not_after, issuer_key_id FROM revocations
			WHERE id > ? ORDER BY id`), base.Seq)
	} else {
		var seq sql.NullInt64
		if err := tx.QueryRowContext(ctx, db.q(`SELECT MAX(id) FROM revocations WHERE issuer_key_id = ?`), issuerKeyID).
			Scan(&seq); err != nil {
			return crlSnapshot{}, err
		}
		s.Seq = seq.Int64
		var n int64
		if err := tx.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM revocations WHERE issuer_key_id = ? AND not_after >= ? AND id <= ?`),
			issuerKeyID, now.UnixMilli(), s.Seq).Scan(&n); err != nil {
			return crlSnapshot{}, err
		}
		s.Entries = make([]CRLEntry, 0, n)
		rows, err = tx.QueryContext(ctx, db.q(`SELECT id, serial, revoked_at, reason, not_after, issuer_key_id FROM revocations
			WHERE issuer_key_id = ? AND not_after >= ? AND id <= ? ORDER BY id`), issuerKeyID, now.UnixMilli(), s.Seq)
	}
	if err != nil {
		return crlSnapshot{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e            CRLEntry
			at, notAfter int64
			reason       sql.NullInt64
			issuer       sql.NullString
		)
		if err := rows.Scan(&e.ID, &e.Serial, &at, &reason, &notAfter, &issuer); err != nil {
			return crlSnapshot{}, err
		}
		if issuer.String != issuerKeyID {
			continue
		}
		s.Seq = max(s.Seq, e.ID)
		if notAfter < now.UnixMilli() {
			continue
		}
		e.RevokedAt, e.Reason, e.NotAfter = ms(at), nullInt(reason), ms(notAfter)
		s.Entries = append(s.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return crlSnapshot{}, err
	}
	last, err := crlLastNumber(ctx, tx, db, issuerKeyID, issuerName)
	if err != nil {
		return crlSnapshot{}, err
	}
	s.Number = last + 1
	return s, nil
}

// queryRower is a *sql.Tx as crlLastNumber needs it.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// crlLastNumber is the last cRLNumber taken by issuerName or issuerKeyID.
func crlLastNumber(ctx context.Context, q queryRower, db *DB, issuerKeyID, issuerName string) (int64, error) {
	var last int64
	err := q.QueryRowContext(ctx, db.q(`SELECT MAX(last) FROM (
			SELECT COALESCE(MAX(last), 0) AS last FROM crl_numbers WHERE issuer_key_id = ?
			UNION ALL SELECT COALESCE(MAX(last), 0) FROM crl_name_numbers WHERE issuer_name = ?) t`),
		issuerKeyID, issuerName).Scan(&last)
	return last, err
}

// storeCRL stores crl as its issuer's latest, with its number as the
// last of the issuer's name and key, unless another CRL took a number at
// or above it meanwhile (errCRLNumberTaken). storedSeq is the ledger_seq
// of the stored CRL when crl's ledger was read: if it changed since, a
// revocation reason changed while crl was built, and the stored CRL keeps
// that mark (its ledger_seq, returned) instead of crl's.
//
// Each counter moves in a guarded upsert (only upwards), and one that does
// not move refuses the number: on PostgreSQL (READ COMMITTED) two CRLs of
// one name built at once, under two keys, both read the same last number
// before either commits; the second's upsert waits for the first and then
// finds the name's counter at its number. (The read first refuses a
// number taken already without writing; SQLite's single writer needs
// nothing more.) The stored CRL's mark is read locked, so that a reason
// change committing meanwhile waits and is not overwritten.
func (db *DB) storeCRL(ctx context.Context, issuerName string, crl CRL, storedSeq int64) (int64, error) {
	seq := crl.LedgerSeq
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		seq = crl.LedgerSeq
		last, err := crlLastNumber(ctx, tx, db, crl.IssuerKeyID, issuerName)
		if err != nil {
			return err
		}
		if last >= crl.Number {
			return errCRLNumberTaken
		}
		for _, counter := range []struct{ stmt, key string }{
			{`INSERT INTO crl_name_numbers (issuer_name, last) VALUES (?, ?)
				ON CONFLICT (issuer_name) DO UPDATE SET last = excluded.last WHERE crl_name_numbers.last < excluded.last`, issuerName},
			{`INSERT INTO crl_numbers (issuer_key_id, last) VALUES (?, ?)
				ON CONFLICT (issuer_key_id) DO UPDATE SET last = excluded.last WHERE crl_numbers.last < excluded.last`, crl.IssuerKeyID},
		} {
			res, err := tx.ExecContext(ctx, db.q(counter.stmt), counter.key, crl.Number)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n != 1 {
				return errCRLNumberTaken
			}
		}
		var current int64
		err = tx.QueryRowContext(ctx, db.q(`SELECT ledger_seq FROM crls WHERE issuer_key_id = ?`+db.dialect.rowLock()), crl.IssuerKeyID).Scan(&current)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case current != storedSeq:
			seq = current
		}
		_, err = tx.ExecContext(ctx, db.q(`INSERT INTO crls (`+crlCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (issuer_key_id) DO UPDATE SET number = excluded.number, this_update = excluded.this_update,
				next_update = excluded.next_update, ledger_seq = excluded.ledger_seq, entries = excluded.entries,
				der = excluded.der, updated_at = excluded.updated_at
			WHERE excluded.number > crls.number`),
			crl.IssuerKeyID, crl.Number, crl.ThisUpdate.UnixMilli(), crl.NextUpdate.UnixMilli(), seq, crl.Entries,
			crl.DER, crl.UpdatedAt.UnixMilli())
		return err
	})
	return seq, err
}

// CRLNumber is the cRLNumber of an issuer's latest stored CRL: what a
// server serving a CRL from memory asks to learn whether another instance
// published a newer one, without reading the CRL itself.
func (db *DB) CRLNumber(ctx context.Context, issuerKeyID string) (int64, error) {
	var n int64
	err := db.r.QueryRowContext(ctx, db.q(`SELECT number FROM crls WHERE issuer_key_id = ?`), issuerKeyID).Scan(&n)
	return n, readErr(err, "CRL of issuer "+issuerKeyID)
}

// StaleCRLIssuers lists the issuers whose ledger has revocations their
// latest CRL does not reflect (or that have no CRL at all): what a crash
// between a revocation and its CRL regeneration leaves behind.
func (db *DB) StaleCRLIssuers(ctx context.Context) ([]string, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT r.issuer_key_id FROM revocations r
		LEFT JOIN crls c ON c.issuer_key_id = r.issuer_key_id
		WHERE r.issuer_key_id IS NOT NULL
		GROUP BY r.issuer_key_id
		HAVING MAX(r.id) > COALESCE(MAX(c.ledger_seq), 0)`)
	if err != nil {
		return nil, fmt.Errorf("store: stale CRLs: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: stale CRLs: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
