package jobs

import "context"

// Live reads the live (ready or running) job of kind with key;
// store.ErrNotFound when there is none.
func (q *Queue) Live(ctx context.Context, kind, key string) (Job, error) {
	return q.db.LiveJob(ctx, kind, key)
}
