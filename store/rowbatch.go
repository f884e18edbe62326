package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Bounds of one statement of a rowBatch: under SQLite's 32,766 host
// parameters and PostgreSQL's 65,535, and rows enough that a round trip
// costs little next to the rows' own work.
const (
	maxBatchParams = 30000
	maxBatchRows   = 1000
)

// rowBatch holds rows bound for one table and writes them with
// multi-row INSERTs. A statement a row is a round trip a row: seeding a
// million orders into PostgreSQL took half an hour that way (each order
// is a dozen rows), and migrate-store's copy of a large SQLite file as
// long; a statement of up to maxBatchRows rows is one.
type rowBatch struct {
	head string // INSERT INTO t (a, b, c) VALUES
	row  string // one row's values, with a ? per parameter: (?, 'valid', ?)
	tail string // what follows the rows in each statement, if anything
	per  int    // parameters per row
	max  int    // rows per statement
	args []any
	rows int
}

// newRowBatch is a batch of rows for head (INSERT INTO … VALUES) in the
// shape of row, whose ? are the parameters each add supplies.
func newRowBatch(head, row string) *rowBatch {
	per := strings.Count(row, "?")
	return &rowBatch{head: head, row: row, per: per, max: min(maxBatchRows, maxBatchParams/max(per, 1))}
}

// add holds one row; vals are its parameters, in the order of row's ?.
func (b *rowBatch) add(vals ...any) {
	if len(vals) != b.per {
		panic(fmt.Sprintf("store: a row of %d values for %d parameters (%s)", len(vals), b.per, b.head))
	}
	b.args = append(b.args, vals...)
	b.rows++
}

// full reports whether the batch holds a whole statement's rows.
func (b *rowBatch) full() bool { return b.rows >= b.max }

// write inserts every row held, in statements of at most b.max rows,
// rewritten for the dialect by q, and empties the batch.
func (b *rowBatch) write(ctx context.Context, tx *sql.Tx, q func(string) string) error {
	for b.rows > 0 {
		n := min(b.rows, b.max)
		var s strings.Builder
		s.Grow(len(b.head) + n*(len(b.row)+2) + len(b.tail))
		s.WriteString(b.head)
		for i := range n {
			if i > 0 {
				s.WriteString(", ")
			}
			s.WriteString(b.row)
		}
		s.WriteString(b.tail)
		if _, err := tx.ExecContext(ctx, q(s.String()), b.args[:n*b.per]...); err != nil {
			return err
		}
		b.args = b.args[n*b.per:]
		b.rows -= n
	}
	b.args = b.args[:0]
	return nil
}
