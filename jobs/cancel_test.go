package jobs

import (
	"context"
	"testing"
	"time"
)

// An operator's cancel of a waiting job runs its handler's Abandon with a
// context of its own, as the runner does: not the request's, which ends
// when the operator's client gives up or the admin API's bound passes —
// half an Abandon (a challenge left processing, an audit row unwritten)
// once the cancel itself has been recorded.
func TestAbandonAfterAnOperatorsCancelOutlivesTheRequest(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		q := NewQueue(openDB(t, ""), nil)
		h := &ctxAbandon{funcHandler: newFuncHandler("k", func(context.Context, *Job) Outcome { return Done() }), err: make(chan error, 1)}
		startRunner(t, q, RunnerOptions{}, h)
		job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		request, cancel := context.WithCancel(context.Background())
		h.during = cancel // the operator's client gives up while Abandon runs
		if _, err := q.Cancel(request, job.ID); err != nil {
			t.Fatal(err)
		}
		if err := <-h.err; err != nil {
			t.Errorf("Abandon's context ended with the request: %v", err)
		}
	})
}

// ctxAbandon is a handler whose Abandon reports whether its context was
// still alive after during ran.
type ctxAbandon struct {
	*funcHandler
	during func()
	err    chan error
}

func (h *ctxAbandon) Abandon(ctx context.Context, job *Job, reason string) {
	h.during()
	h.err <- ctx.Err()
	h.funcHandler.Abandon(ctx, job, reason)
}
