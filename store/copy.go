package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrTargetNotEmpty: CopyStore's target already holds data.
var ErrTargetNotEmpty = errors.New("store: the target database is not empty")

// TableCount is the rows of one table CopyStore copied, counted on each
// side after the copy.
type TableCount struct {
	Table        string
	Source, Dest int64
}

// CopyStore copies every row of every table of src, a SQLite store, into
// dst, a PostgreSQL store, for an operator moving a single instance onto
// the database a fleet shares. It is an offline operation: nothing may
// write to src meanwhile (stop Caddy first).
//
// Both stores are at this binary's schema version (opening them migrated
// them). dst must be empty — no table holds a row — or ErrTargetNotEmpty
// is returned and nothing is written. The copy is one transaction on dst:
// a failure leaves it empty. Tables are copied parents first (foreign
// keys), text PostgreSQL refuses (not UTF-8, a NUL) is copied with U+FFFD
// in its place (text), identity sequences are moved past every id
// the source ever gave, and the row counts of both sides are compared
// before the transaction commits; then the target's planner statistics
// are gathered (Analyze), so that a fleet moved onto it is not planned
// for empty tables. (The
// emptiness check does not lock the tables: of two copies into one
// target at once, READ COMMITTED, the second fails on the rows' primary
// keys and is undone, leaving the first's copy.)
func CopyStore(ctx context.Context, src, dst *DB) ([]TableCount, error) {
	if src.dialect.name() != "sqlite" || dst.dialect.name() != "postgres" {
		return nil, fmt.Errorf("store: copying from %s to %s: only from SQLite to PostgreSQL", src.dialect.name(), dst.dialect.name())
	}
	tables, err := sqliteTablesParentsFirst(ctx, src.r)
	if err != nil {
		return nil, err
	}
	// Every table is read in one read transaction of the source, one
	// snapshot: an instance still writing to it (which it should not)
	// cannot make the copy see an order without its account, only miss
	// what it writes afterwards.
	stx, err := src.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("store: reading the source: %w", err)
	}
	defer func() { _ = stx.Rollback() }()
	// An AUTOINCREMENT table's next id is past every id it ever gave, a
	// deleted row's too (a revocation pruned with its certificate, a
	// settled job): the target's sequences go on from there, not from
	// the highest id still held. A revocation's id is compared with the
	// ledger_seq of the CRL that took it (StaleCRLIssuers), and a job's
	// or an audit row's names it in the operator's routes.
	given, err := sqliteSequences(ctx, stx)
	if err != nil {
		return nil, err
	}
	for i := range tables {
		tables[i].given = given[tables[i].name]
	}
	var counts []TableCount
	err = dst.eng.do(ctx, func(tx *sql.Tx) error {
		counts = counts[:0] // fn may run again (see engine)
		for _, t := range tables {
			var n int64
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&n); err != nil {
				return fmt.Errorf("store: counting %s in the target: %w", t.name, err)
			}
			if n > 0 {
				return fmt.Errorf("%w: table %s holds %d rows", ErrTargetNotEmpty, t.name, n)
			}
		}
		for _, t := range tables {
			c, err := copyTable(ctx, stx, tx, t)
			if err != nil {
				return err
			}
			counts = append(counts, c)
		}
		for _, c := range counts {
			if c.Source != c.Dest {
				return fmt.Errorf("store: table %s: %d rows in the source, %d in the target", c.Table, c.Source, c.Dest)
			}
		}
		return nil
	}, false)
	if err != nil {
		return nil, err
	}
	if err := dst.Analyze(ctx); err != nil {
		return counts, fmt.Errorf("store: every row copied, then: %w", err)
	}
	return counts, nil
}

type copyTableInfo struct {
	name    string
	columns []string
	given   int64 // the highest id the source's AUTOINCREMENT ever gave (0: none)
}
