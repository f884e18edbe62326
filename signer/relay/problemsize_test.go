package relay

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// compoundOf is an upstream problem document of about size bytes: a
// compound problem of as many tiny subproblems as fit.
func compoundOf(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"urn:ietf:params:acme:error:compound","detail":"d","status":400,"subproblems":[`)
	const sub = `{"type":"t","detail":"d"}`
	for n := 0; b.Len()+len(sub)+3 < size; n++ {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(sub)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// An upstream's problem document is read only up to maxProblemBytes:
// acmez's text of a problem grows by concatenation, one subproblem at a
// time, so a document of tens of thousands of tiny subproblems, up to
// the bound of other answers, cost seconds of CPU per attempt. A larger
// one is an upstream answer that is not ACME's, retried like a body that
// is not JSON; one within the bound is the upstream's stated refusal.
func TestAnUpstreamProblemDocumentLargerThanAnyACMEProblemIsRefusedUnreadAndCheaply(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		wantOut string // the outcome starts with
		wantIn  string // and holds
	}{
		{"ok/a problem within the bound is the upstream's refusal", maxProblemBytes, "failed: ", "urn:ietf:params:acme:error:compound"},
		{"fail/a problem as large as any other answer may be is not read to its end", maxAnswerBytes - 1024, "retry: ",
			fmt.Sprintf("problem document is larger than %d bytes", maxProblemBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := compoundOf(tt.size)
			if len(doc) > tt.size {
				t.Fatalf("a document of %d bytes; want at most %d", len(doc), tt.size)
			}
			up := registeredUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(doc)
			})
			b := newBench(t, up.URL+"/dir", ChallengeBypass)
			req := b.finalized(t, "problem.example.com")
			if _, err := b.s.Issue(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			out := b.s.RunJob(context.Background(), b.job(t, req.OrderID)).String()
			t.Logf("an attempt answered a problem document of %d bytes in %v", len(doc), time.Since(start))
			if !strings.HasPrefix(out, tt.wantOut) || !strings.Contains(out, tt.wantIn) {
				t.Errorf("outcome %.300q; want one starting %q holding %q", out, tt.wantOut, tt.wantIn)
			}
		})
	}
}
