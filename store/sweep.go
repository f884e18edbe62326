package store

import (
	"context"
)

// sweepBatch is how many rows one statement of a sweep that deletes
// whatever is due (PruneJobs, PruneNonces) deletes. Each statement is a
// write of its own, and on SQLite every other write — issuance's — waits
// for the one writer while it runs: a backlog of a million settled jobs
// deleted in one statement held it for seconds (on PostgreSQL, one long
// transaction). A thousand rows hold it for a few milliseconds (see
// BenchmarkTheWriterHeldByPruningABacklogOfSettledJobs: 5,000 held it
// for tens). A variable so that the tests can make a backlog of a few
// rows span batches.
var sweepBatch = 1000

// deleteInBatches runs stmt — a DELETE of at most batch of the rows due,
// its last placeholder the batch's LIMIT, args the others — as writes of
// their own until one deletes fewer than a batch, and returns how many
// rows it deleted. Between batches it stops when ctx ends, returning what
// it deleted so far. A concurrent sweep of the same rows (a second
// instance) may make a batch come short and this one stop early; that one
// goes on, and the next round takes what is left.
func (db *DB) deleteInBatches(ctx context.Context, stmt string, args ...any) (int64, error) {
	batch := sweepBatch
	stmt = db.q(stmt)
	args = append(args, batch)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := db.wr.ExecContext(ctx, stmt, args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}
