package store

import "context"

// LiveJob reads the live (ready or running) job of kind with key, through
// the index that keeps their identity unique: a read that costs the same
// however many settled jobs of the kind the table holds. ErrNotFound when
// there is none.
func (db *DB) LiveJob(ctx context.Context, kind, key string) (Job, error) {
	j, err := scanJob(db.r.QueryRowContext(ctx, db.q(`SELECT `+jobCols+` FROM jobs
		WHERE kind = ? AND key = ? AND status IN ('ready','running')`), kind, key))
	return j, readErr(err, "live "+kind+" job "+key)
}
