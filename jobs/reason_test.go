package jobs

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// A handler's reason is often a program's words: a script signer's first
// stderr line, cut at 200 bytes, perhaps inside a character; a tool that
// printed a NUL. PostgreSQL refuses such text in a column, and the
// outcome's write, retried while the runner runs, then never landed: the
// job stayed running (its lease renewed) and its order processing until
// the next restart. The reason is stored as valid text instead.
func TestAnOutcomeWhoseReasonIsNotValidTextIsStillRecorded(t *testing.T) {
	tests := []struct {
		name   string
		out    Outcome
		status store.JobStatus
	}{
		{"retry/a character cut in two", Retry("exited with status 1: " + "Zertifikat ung\xc3"), store.JobReady},
		{"retry/a NUL byte", Retry("exited with status 1: bad\x00output"), store.JobReady},
		{"failed/bytes that are no UTF-8", Failed("exited with status 1: \xff\xfe"), store.JobFailed},
	}
	eachDialect(t, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				q := NewQueue(openDB(t, ""), nil)
				h := newFuncHandler("k", func(context.Context, *Job) Outcome { return tc.out })
				startRunner(t, q, RunnerOptions{BackoffBase: time.Hour, StopTimeout: 100 * time.Millisecond}, h)
				job, _, err := q.Enqueue(context.Background(), Spec{Kind: "k", MaxAttempts: 3})
				if err != nil {
					t.Fatal(err)
				}
				var got Job
				waitFor(t, "the attempt recorded", func() bool {
					got, err = q.Get(context.Background(), job.ID)
					return err == nil && got.Attempts == 1 && got.Status == tc.status
				})
				if !utf8.ValidString(got.LastError) || strings.ContainsRune(got.LastError, 0) || !strings.HasPrefix(got.LastError, "exited with status 1: ") {
					t.Errorf("last error %q; want the reason as valid text without NUL", got.LastError)
				}
			})
		}
	})
}
