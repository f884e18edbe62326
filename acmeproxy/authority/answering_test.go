package authority

import (
	"errors"
	"testing"

	"github.com/acmeproxy/caddy-acme-proxy/acme"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Concurrent answers to one challenge share one validation (see
// AnswerChallenge): the outcome of the first is what the others are
// answered, kept a moment for those that arrive just after it; a first
// that failed hands the challenge to the next at once.
func TestAnswersToOneChallengeShareTheFirstsOutcome(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantFirst bool // an answer arriving after the first left goes first itself
	}{
		{"a first answer that settled is shared with the ones after it", nil, false},
		{"a first answer that failed hands the challenge to the next", errors.New("the database went away"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w answering
			call, first := w.join("c1")
			if !first {
				t.Fatal("the first answer to a challenge does not go first")
			}
			waiting, first := w.join("c1")
			if first || waiting != call {
				t.Fatal("a second answer while the first is under way does not wait for it")
			}
			if _, first := w.join("c2"); !first {
				t.Fatal("an answer to another challenge waits")
			}
			w.leave("c1", call, store.Challenge{ID: "c1", Status: acme.StatusValid}, tc.err)
			<-waiting.done
			if !errors.Is(waiting.err, tc.err) || tc.err == nil && waiting.c.Status != acme.StatusValid {
				t.Errorf("the waiting answer got %v %v", waiting.c.Status, waiting.err)
			}
			if _, first := w.join("c1"); first != tc.wantFirst {
				t.Errorf("an answer after the first left goes first: %v; want %v", first, tc.wantFirst)
			}
		})
	}
}
