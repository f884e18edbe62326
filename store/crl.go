package store

import (
	"bytes"
	"context"
	"crypto/sha256"
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
	// mark is the CRLRead.Mark of the read it was built from, stored
	// with it for StaleCRLIssuers ("" for none).
	mark string
}

// CRLEntry is a revoked certificate a CRL lists: one unexpired, or
// expired recently (PublishCRLFrom's dropBefore).
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

const crlCols = `issuer_key_id, number, this_update, next_update, ledger_seq, entries, parts, updated_at`

// scanCRL scans a crls row: the CRL without its DER, and the number of
// parts its DER is stored in (see storeCRL).
func scanCRL(r rowScanner) (CRL, int, error) {
	var (
		c                     CRL
		parts                 int
		this, next, updatedAt int64
	)
	if err := r.Scan(&c.IssuerKeyID, &c.Number, &this, &next, &c.LedgerSeq, &c.Entries, &parts, &updatedAt); err != nil {
		return CRL{}, 0, err
	}
	c.ThisUpdate, c.NextUpdate, c.UpdatedAt = ms(this), ms(next), ms(updatedAt)
	return c, parts, nil
}

// GetCRL reads the latest CRL of an issuer: the crls row and the parts of
// the number it names, in one read snapshot, so that a CRL stored
// meanwhile (whose last write deletes the parts of the one before) is
// not seen half.
func (db *DB) GetCRL(ctx context.Context, issuerKeyID string) (CRL, error) {
	what := "CRL of issuer " + issuerKeyID
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return CRL{}, readErr(err, what)
	}
	defer tx.Rollback()
	c, parts, err := db.crlRow(ctx, tx, issuerKeyID)
	if err != nil {
		return CRL{}, readErr(err, what)
	}
	if c.DER, err = readCRLParts(ctx, tx, db, issuerKeyID, c.Number, parts); err != nil {
		return CRL{}, readErr(err, what)
	}
	return c, nil
}

// GetCRLInfo reads what GetCRL does but the DER: the latest CRL of an
// issuer as its crls row has it (number, thisUpdate, nextUpdate, ledger
// position, entries). For a decision about the CRL that need not read its
// megabytes: RefreshCRLs asks every minute how old each CRL is.
func (db *DB) GetCRLInfo(ctx context.Context, issuerKeyID string) (CRL, error) {
	c, _, err := db.crlRow(ctx, db.r, issuerKeyID)
	return c, readErr(err, "CRL of issuer "+issuerKeyID)
}

// crlRow reads an issuer's crls row through q (the read pool, or GetCRL's
// snapshot): the CRL without its DER and the number of its parts.
func (db *DB) crlRow(ctx context.Context, q queryRower, issuerKeyID string) (CRL, int, error) {
	return scanCRL(q.QueryRowContext(ctx, db.q(`SELECT `+crlCols+` FROM crls WHERE issuer_key_id = ?`), issuerKeyID))
}

// readCRLParts joins the parts of an issuer's CRL numbered number, which
// its crls row says are parts many.
func readCRLParts(ctx context.Context, tx *sql.Tx, db *DB, issuerKeyID string, number int64, parts int) ([]byte, error) {
	rows, err := tx.QueryContext(ctx, db.q(`SELECT p.part, p.held_by, h.number, CASE WHEN p.held_by IS NULL THEN p.der ELSE h.der END
		FROM crl_parts p LEFT JOIN crl_parts h
			ON h.issuer_key_id = p.issuer_key_id AND h.number = p.held_by AND h.part = p.part AND h.held_by IS NULL
		WHERE p.issuer_key_id = ? AND p.number = ? ORDER BY p.part`),
		issuerKeyID, number)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var der []byte
	next := 0
	for rows.Next() {
		var (
			part           int
			heldBy, holder sql.NullInt64
			chunk          []byte
		)
		if err := rows.Scan(&part, &heldBy, &holder, &chunk); err != nil {
			return nil, err
		}
		if part != next {
			break
		}
		if heldBy.Valid && !holder.Valid {
			return nil, fmt.Errorf("CRL %d: part %d is held by CRL %d's, which is gone", number, part, heldBy.Int64)
		}
		if der == nil {
			der = make([]byte, 0, parts*len(chunk))
		}
		der = append(der, chunk...)
		next++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if next != parts {
		return nil, fmt.Errorf("CRL %d is stored in %d parts, %d of them found in order", number, parts, next)
	}
	return der, nil
}

// PublishCRL builds and stores a new CRL for an issuer: it reads the
// issuer's ledger entries (a certificate past its notAfter at now is
// dropped) and the next cRLNumber from one read snapshot, has build
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
	return db.PublishCRLFrom(ctx, issuerKeyID, issuerName, now, now, nil, func(r CRLRead) ([]byte, time.Time, time.Time, error) {
		return build(r.Number, r.Entries)
	})
}

// CRLBase is what a publisher keeps of the last CRL it published of an
// issuer, so that the next one reads only the ledger rows after it
// (PublishCRLFrom).
type CRLBase struct {
	Number int64 // the cRLNumber it was published as
	Seq    int64 // its LedgerSeq: the last ledger row it read
	// Mark is its read's CRLRead.Mark.
	Mark string
	// Count is the number of its entries still listed at the dropBefore
	// given to PublishCRLFrom (their certificate's notAfter not before
	// it).
	Count int64
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
	// Follows is the thisUpdate of the issuer's CRL stored when this was
	// read (zero for none). A publisher that promises each CRL a later
	// second than the one before refuses to build in its second: a
	// concurrent build (this instance's, another's) may have stored one
	// since the publisher last looked.
	Follows time.Time
	// Mark is what a CRL built from this one gives back (CRLBase.Mark),
	// by which the store tells which ledger rows committed after this
	// read (on PostgreSQL its snapshot; "" on SQLite, whose ledger rows
	// commit in the order of their ids).
	Mark string
}

// CRLBuildFrom signs the CRL of r, and returns its DER, thisUpdate and
// nextUpdate.
type CRLBuildFrom func(r CRLRead) (der []byte, thisUpdate, nextUpdate time.Time, err error)

// PublishCRLFrom is PublishCRL for a publisher that keeps what its last
// CRL of the issuer listed (base, nil for none): when the ledger up to
// base.Seq still holds exactly what base holds, build gets only the rows
// after it (a Delta read), and every listed entry otherwise. An entry is
// listed until its certificate's notAfter is before dropBefore: now, or
// earlier for a publisher that keeps an expired certificate on its CRLs
// a while (RFC 5280 §3.3 wants it on one CRL issued after it expired).
//
// A ledger row's id is taken when it is inserted, not when it commits:
// on PostgreSQL a row with a lower id can commit after one with a higher
// id that a CRL already read, and a read of the rows after that CRL's
// seq would miss it for good. So each row records the transaction that
// inserted it, each read the snapshot it was made in (CRLRead.Mark), and
// a row of the issuer up to base.Seq that base's snapshot did not see
// means a full read — found among the rows of transactions that snapshot
// did not see, not by reading every row below base.Seq. SQLite commits
// ledger rows in the order of their ids, and checks nothing. No row
// below base.Seq is deleted while on a CRL: the retention sweep deletes
// a ledger row only with its certificate, past its notAfter. A stored
// latest CRL that is not base's (another publisher stored one, or a
// revocation reason changed since, which marks it) means a full read.
func (db *DB) PublishCRLFrom(ctx context.Context, issuerKeyID, issuerName string, now, dropBefore time.Time, base *CRLBase, build CRLBuildFrom) (CRL, error) {
	return db.PublishCRLFromAudited(ctx, issuerKeyID, issuerName, now, dropBefore, base, build, nil)
}

// PublishCRLFromAudited is PublishCRLFrom for a publication someone asked
// for (an operator's regeneration): audit, when not nil, is the audit row
// of the CRL stored, written in the transaction that names it, so that no
// such CRL is stored without its row, and an attempt that does not store
// its CRL (its number taken meanwhile) writes none.
func (db *DB) PublishCRLFromAudited(ctx context.Context, issuerKeyID, issuerName string, now, dropBefore time.Time, base *CRLBase,
	build CRLBuildFrom, audit func(CRL) AuditEvent) (CRL, error) {
	if issuerKeyID == "" || issuerName == "" {
		return CRL{}, errors.New("store: publishing a CRL needs an issuer's key id and name")
	}
	const attempts = 4
	share := true
	for attempt := 1; ; attempt++ {
		snap, err := db.crlSnapshot(ctx, issuerKeyID, issuerName, dropBefore, base)
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
			LedgerSeq: snap.Seq, Entries: entries, DER: der, UpdatedAt: now, mark: snap.Mark}
		out.LedgerSeq, err = db.storeCRL(ctx, issuerName, out, snap.storedSeq, share, audit)
		if errors.Is(err, errCRLPartGone) {
			share = false // the next attempt writes every part
		}
		if (errors.Is(err, errCRLNumberTaken) || errors.Is(err, errCRLPartGone)) && attempt < attempts {
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

// errCRLPartGone: a part the CRL shares with the one stored before it was
// deleted while the CRL was stored (another publisher's CRL was named
// meanwhile, and the parts only the one before used went with it).
var errCRLPartGone = errors.New("a part it shares with an earlier CRL was deleted while it was stored")

// crlSnapshot is what a CRL is built from, read at one moment.
type crlSnapshot struct {
	CRLRead
	// storedSeq is the ledger_seq of the issuer's stored CRL (0 for
	// none): a change of it before the new CRL is stored is a
	// revocation reason changed meanwhile.
	storedSeq int64
}

// crlSnapshot reads, in one read-only transaction (one snapshot), the
// issuer's last ledger row, its entries up to it whose certificate's
// notAfter is not before dropBefore (only those after base.Seq when the
// rows up to it are still base's), and the next cRLNumber of its name
// and key.
func (db *DB) crlSnapshot(ctx context.Context, issuerKeyID, issuerName string, dropBefore time.Time, base *CRLBase) (crlSnapshot, error) {
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return crlSnapshot{}, err
	}
	defer tx.Rollback()
	var (
		s                     crlSnapshot
		storedNumber, follows int64
	)
	err = tx.QueryRowContext(ctx, db.q(`SELECT number, ledger_seq, this_update FROM crls WHERE issuer_key_id = ?`), issuerKeyID).
		Scan(&storedNumber, &s.storedSeq, &follows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return crlSnapshot{}, err
	}
	stored := err == nil
	if stored {
		s.Follows = ms(follows)
	}
	mark, late := db.dialect.crlLateRows()
	if mark != "" {
		if err := tx.QueryRowContext(ctx, mark).Scan(&s.Mark); err != nil {
			return crlSnapshot{}, err
		}
	}
	if base != nil && stored && storedNumber == base.Number && s.storedSeq == base.Seq {
		s.Delta = true
		if late != "" {
			var found bool
			if base.Mark == "" {
				found = true // a base read without a mark: read in full
			} else if err := tx.QueryRowContext(ctx, db.q(late), issuerKeyID, base.Mark, base.Seq, base.Mark).Scan(&found); err != nil {
				return crlSnapshot{}, err
			}
			s.Delta = !found
		}
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
			issuerKeyID, dropBefore.UnixMilli(), s.Seq).Scan(&n); err != nil {
			return crlSnapshot{}, err
		}
		s.Entries = make([]CRLEntry, 0, n)
		rows, err = tx.QueryContext(ctx, db.q(`SELECT id, serial, revoked_at, reason, not_after, issuer_key_id FROM revocations
			WHERE issuer_key_id = ? AND not_after >= ? AND id <= ? ORDER BY id`), issuerKeyID, dropBefore.UnixMilli(), s.Seq)
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
		if notAfter < dropBefore.UnixMilli() {
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

// queryRower is a pool or a transaction, as crlLastNumber and crlRow
// read through it.
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

// crlPartSize is the most bytes of a CRL's DER one stored part holds (see
// storeCRL): 64 pages of SQLite's.
const crlPartSize = 256 << 10

// crlPruneBatch is how many parts of earlier CRLs one write deletes.
const crlPruneBatch = 4

// crlPart is one part of a CRL as it is stored: bytes and their SHA-256,
// or (heldBy above 0) the number of the CRL whose row of the same part
// holds them.
type crlPart struct {
	der    []byte
	digest []byte
	heldBy int64
}

// holding is a part that holds its bytes.
func holding(der []byte) crlPart {
	sum := sha256.Sum256(der)
	return crlPart{der: der, digest: sum[:]}
}

// holdingAll is every part of parts holding its bytes.
func holdingAll(parts [][]byte) []crlPart {
	out := make([]crlPart, len(parts))
	for i, p := range parts {
		out[i] = holding(p)
	}
	return out
}

// shareCRLParts turns each of parts whose bytes the issuer's stored CRL
// has in the same place into a reference to the row that holds them
// (see migration crl_parts_held_by). Only the stored CRL's parts are
// shared: the others' may be deleted at any moment. One that is deleted
// all the same before the new CRL is named (a CRL named meanwhile, whose
// storing deleted the parts its predecessor alone used) makes the last
// write refuse the CRL (errCRLPartGone).
func (db *DB) shareCRLParts(ctx context.Context, issuerKeyID string, parts []crlPart) error {
	rows, err := db.r.QueryContext(ctx, db.q(`SELECT p.part, h.number, h.digest FROM crls c
		JOIN crl_parts p ON p.issuer_key_id = c.issuer_key_id AND p.number = c.number
		JOIN crl_parts h ON h.issuer_key_id = p.issuer_key_id AND h.part = p.part AND h.number = COALESCE(p.held_by, p.number)
		WHERE c.issuer_key_id = ? AND h.held_by IS NULL AND h.digest IS NOT NULL`), issuerKeyID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			part   int
			holder int64
			digest []byte
		)
		if err := rows.Scan(&part, &holder, &digest); err != nil {
			return err
		}
		if part < len(parts) && bytes.Equal(parts[part].digest, digest) {
			parts[part] = crlPart{der: []byte{}, heldBy: holder}
		}
	}
	return rows.Err()
}

// splitCRL cuts der into the parts it is stored in: crlPartSize bytes
// each, the last one the rest (one part, maybe empty, for a short der).
func splitCRL(der []byte) [][]byte {
	parts := make([][]byte, 0, len(der)/crlPartSize+1)
	for len(der) > crlPartSize {
		parts = append(parts, der[:crlPartSize])
		der = der[crlPartSize:]
	}
	return append(parts, der)
}

// storeCRL stores crl as its issuer's latest, with its number as the
// last of the issuer's name and key, unless another CRL took a number at
// or above it meanwhile (errCRLNumberTaken). storedSeq is the ledger_seq
// of the stored CRL when crl's ledger was read: if it changed since, a
// revocation reason changed while crl was built, and the stored CRL keeps
// that mark (its ledger_seq, returned) instead of crl's.
//
// The DER goes into crl_parts, crlPartSize bytes a row (a part the
// stored CRL has in the same place only named, when share: see
// shareCRLParts, and errCRLPartGone for the one race it has), each part in a
// write of its own, and the crls row naming the number and the part count
// in the last, which writes the last part too: written whole in one
// transaction, a CRL of 100,000 entries (4.7 MiB) held SQLite's one writer
// 66-105 ms, every issuance waiting behind it. A CRL of one part is one
// write, as before. Of more, the first write takes the number (so no
// other publisher writes parts under it). Every part's write is durable:
// lazy ones would leave the last write to make the whole CRL durable, one
// fsync of 4.7 MiB of log (33-47 ms, the writer held meanwhile, against
// 1-5 ms a part written durably). A reader reads the crls row
// and the parts it names in one snapshot (GetCRL), so it sees the CRL
// before or the one after, never parts of two. The last write refuses to
// name the CRL when a higher number is named already (another publisher,
// which read the ledger after this one took its number, got there
// first), and then its parts are deleted and errCRLNumberTaken returned.
//
// After the last write the parts of the issuer's lower numbers are
// deleted, a few a write: the CRL before, and those a publisher left when
// it died (or failed) between its first and its last write, whose number
// is below any number taken after it. A deletion that fails is left to
// the next CRL stored. (A number taken and never named is a gap in the
// sequence, which RFC 5280 allows: cRLNumber only has to increase.)
//
// Each counter moves in a guarded upsert (only upwards), and one that does
// not move refuses the number: on PostgreSQL (READ COMMITTED) two CRLs of
// one name built at once, under two keys, both read the same last number
// before either commits; the second's upsert waits for the first and then
// finds the name's counter at its number. (The read first refuses a
// number taken already without writing; SQLite's single writer needs
// nothing more.) The stored CRL's mark is read locked, so that a reason
// change committing meanwhile waits and is not overwritten.
//
// audit, when not nil, is the audit row of crl, written with its last
// write.
func (db *DB) storeCRL(ctx context.Context, issuerName string, crl CRL, storedSeq int64, share bool, audit func(CRL) AuditEvent) (int64, error) {
	parts := holdingAll(splitCRL(crl.DER))
	if len(parts) > 1 {
		if share {
			if err := db.shareCRLParts(ctx, crl.IssuerKeyID, parts); err != nil {
				return 0, err
			}
		}
		if err := db.writeCRLParts(ctx, issuerName, crl, parts[:len(parts)-1]); err != nil {
			return 0, err
		}
	}
	return db.finishCRL(ctx, issuerName, crl, storedSeq, parts, audit)
}

// finishCRL is storeCRL's last write, of crl's last part, its crls row
// and its audit row (audit, when not nil), and the deletions after it: of
// the parts of lower numbers once crl is named, of crl's own when it is
// refused.
func (db *DB) finishCRL(ctx context.Context, issuerName string, crl CRL, storedSeq int64, parts []crlPart, audit func(CRL) AuditEvent) (int64, error) {
	last := len(parts) - 1
	seq := crl.LedgerSeq
	err := db.withTx(ctx, func(tx *sql.Tx) error {
		seq = crl.LedgerSeq
		if last == 0 {
			if err := takeCRLNumber(ctx, tx, db, issuerName, crl); err != nil {
				return err
			}
		}
		var current, number int64
		err := tx.QueryRowContext(ctx, db.q(`SELECT ledger_seq, number FROM crls WHERE issuer_key_id = ?`+db.dialect.rowLock()), crl.IssuerKeyID).
			Scan(&current, &number)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case number >= crl.Number:
			return errCRLNumberTaken
		case current != storedSeq:
			seq = current
		}
		if err := insertCRLPart(ctx, tx, db, crl, last, parts[last]); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM crl_parts WHERE issuer_key_id = ? AND number = ?`),
			crl.IssuerKeyID, crl.Number).Scan(&have); err != nil {
			return err
		}
		if have != len(parts) {
			return fmt.Errorf("CRL %d: %d of its %d parts stored", crl.Number, have, len(parts))
		}
		// The rows its shared parts name still hold their bytes: deleting
		// them takes this lock on the crls row too (pruneCRLParts).
		var gone int
		if err := tx.QueryRowContext(ctx, db.q(`SELECT COUNT(*) FROM crl_parts p LEFT JOIN crl_parts h
				ON h.issuer_key_id = p.issuer_key_id AND h.number = p.held_by AND h.part = p.part AND h.held_by IS NULL
			WHERE p.issuer_key_id = ? AND p.number = ? AND p.held_by IS NOT NULL AND h.number IS NULL`),
			crl.IssuerKeyID, crl.Number).Scan(&gone); err != nil {
			return err
		}
		if gone > 0 {
			return errCRLPartGone
		}
		res, err := tx.ExecContext(ctx, db.q(`INSERT INTO crls (`+crlCols+`, mark) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (issuer_key_id) DO UPDATE SET number = excluded.number, this_update = excluded.this_update,
				next_update = excluded.next_update, ledger_seq = excluded.ledger_seq, entries = excluded.entries,
				parts = excluded.parts, updated_at = excluded.updated_at, mark = excluded.mark
			WHERE excluded.number > crls.number`),
			crl.IssuerKeyID, crl.Number, crl.ThisUpdate.UnixMilli(), crl.NextUpdate.UnixMilli(), seq, crl.Entries,
			len(parts), crl.UpdatedAt.UnixMilli(), strOrNull(crl.mark))
		if err != nil {
			return err
		}
		if err := oneRowOrTaken(res); err != nil || audit == nil {
			return err
		}
		named := crl
		named.LedgerSeq = seq
		return db.insertAudit(ctx, tx, audit(named))
	})
	if err != nil {
		if last > 0 && (errors.Is(err, errCRLNumberTaken) || errors.Is(err, errCRLPartGone)) {
			_ = db.pruneCRLParts(ctx, crl.IssuerKeyID, crl.Number, `number = ?`)
		}
		return seq, err
	}
	// What fails to go now goes with the next CRL stored.
	_ = db.pruneCRLParts(ctx, crl.IssuerKeyID, crl.Number, `number < ?`)
	return seq, nil
}

// writeCRLParts takes crl's number and stores parts as its first parts,
// each in a write of its own (see storeCRL).
func (db *DB) writeCRLParts(ctx context.Context, issuerName string, crl CRL, parts []crlPart) error {
	for i, p := range parts {
		err := db.withTx(ctx, func(tx *sql.Tx) error {
			if i == 0 {
				if err := takeCRLNumber(ctx, tx, db, issuerName, crl); err != nil {
					return err
				}
			}
			return insertCRLPart(ctx, tx, db, crl, i, p)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func insertCRLPart(ctx context.Context, tx *sql.Tx, db *DB, crl CRL, part int, p crlPart) error {
	var heldBy, digest any
	if p.heldBy > 0 {
		heldBy = p.heldBy
	} else {
		digest = p.digest
	}
	_, err := tx.ExecContext(ctx, db.q(`INSERT INTO crl_parts (issuer_key_id, number, part, der, digest, held_by) VALUES (?, ?, ?, ?, ?, ?)`),
		crl.IssuerKeyID, crl.Number, part, p.der, digest, heldBy)
	return err
}

// takeCRLNumber sets the counters of issuerName and crl's key to crl's
// number, in tx, or returns errCRLNumberTaken when either is at it or
// above already (see storeCRL).
func takeCRLNumber(ctx context.Context, tx *sql.Tx, db *DB, issuerName string, crl CRL) error {
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
		if err := oneRowOrTaken(res); err != nil {
			return err
		}
	}
	return nil
}

// oneRowOrTaken is the outcome of a guarded upsert of a CRL's number: it
// moved one row, or its guard found the number taken (errCRLNumberTaken).
func oneRowOrTaken(res sql.Result) error {
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return err
	case n != 1:
		return errCRLNumberTaken
	}
	return nil
}

// pruneCRLParts deletes the parts of an issuer's CRLs whose number
// matches which (`number < ?`, `number = ?`) against number,
// crlPruneBatch parts a lazy write, until none is left — but those a
// stored part names in held_by, which hold its bytes.
func (db *DB) pruneCRLParts(ctx context.Context, issuerKeyID string, number int64, which string) error {
	for {
		var n int64
		err := db.withLazyTx(ctx, func(tx *sql.Tx) error {
			// Under the crls row's lock, as finishCRL checks that the rows
			// its shared parts name are there.
			// (SQLite's one writer needs none.)
			if lock := db.dialect.rowLock(); lock != "" {
				var locked int
				err := tx.QueryRowContext(ctx, db.q(`SELECT 1 FROM crls WHERE issuer_key_id = ?`+lock), issuerKeyID).Scan(&locked)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			res, err := tx.ExecContext(ctx, db.q(`DELETE FROM crl_parts WHERE issuer_key_id = ? AND (number, part) IN
				(SELECT number, part FROM crl_parts c WHERE issuer_key_id = ? AND `+which+`
					AND NOT EXISTS (SELECT 1 FROM crl_parts r
						WHERE r.issuer_key_id = c.issuer_key_id AND r.held_by = c.number AND r.part = c.part)
				ORDER BY number, part LIMIT ?)`),
				issuerKeyID, issuerKeyID, number, crlPruneBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return fmt.Errorf("store: deleting the parts of earlier CRLs of issuer %s: %w", issuerKeyID, err)
		}
		// A batch that deleted rows naming a holder may have left that
		// holder unnamed: the loop ends on a batch that deletes nothing.
		if n == 0 {
			return nil
		}
	}
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
// between a revocation and its CRL regeneration leaves behind. That is a
// ledger row above the CRL's ledger_seq, or (PostgreSQL, whose ids are
// taken at insert and committed in any order) one below it that the
// snapshot the CRL read the ledger in did not see (see crlStaleRows).
func (db *DB) StaleCRLIssuers(ctx context.Context) ([]string, error) {
	rows, err := db.r.QueryContext(ctx, db.staleCRLQuery())
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

// staleCRLQuery is StaleCRLIssuers' statement. It finds the CAs with a
// ledger by skipping from one to the next through revocations_crl (each
// step the least CA above the last: a recursive query, since neither
// database skips through an index for a DISTINCT on its own), and asks
// of each, whose stored CRL there is, whether a ledger row of it is not
// on that CRL, as the dialect can tell by the rows written since the
// CRL read the ledger (crlStaleRows). (A ledger_seq of 0 or below is a
// CRL a reason change made stale: see ChangeRevocationReason.) So it reads a row or two per CA and
// the rows no CRL lists yet, never the whole ledger, which a mass
// revocation grows to hundreds of thousands of rows.
func (db *DB) staleCRLQuery() string {
	return `WITH RECURSIVE cas(k) AS (
			SELECT MIN(issuer_key_id) FROM revocations WHERE issuer_key_id IS NOT NULL
			UNION ALL
			SELECT (SELECT MIN(r.issuer_key_id) FROM revocations r WHERE r.issuer_key_id > cas.k)
			FROM cas WHERE cas.k IS NOT NULL)
		SELECT cas.k FROM cas LEFT JOIN crls c ON c.issuer_key_id = cas.k
		WHERE cas.k IS NOT NULL AND (c.issuer_key_id IS NULL OR c.ledger_seq <= 0 OR ` + db.dialect.crlStaleRows() + `)`
}
